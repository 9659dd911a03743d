"""Validation of a request against its method's type: once, at the dispatcher, with one error
shape (BadInput: code `bad_input`, the field at fault, the values allowed).

Fields are checked in the order the type declares them (the order the console's checks have
always run): a required field that is absent or null is "FIELD is required"; a present field
with a `Check` runs its validator (the operator's message, unchanged); the rest is msgspec's
conversion against the type, its error said in the same words for every method.
"""

from __future__ import annotations

import re
import types
import typing
from functools import cache
from typing import Any, Literal, get_args, get_origin

import msgspec

from nodeos.errors import BadInput

from .spec import Check, Method, Request

_AT = re.compile(r"at `\$\.([A-Za-z0-9_]+)")
_MISSING = re.compile(r"missing required field `([A-Za-z0-9_]+)`")


@cache
def _fields(request: type[Request]) -> tuple[tuple[str, Any, bool, Check | None, msgspec.Meta | None], ...]:
    """(name, type without Annotated or None, required, its Check, its Meta) for each field, in order."""
    hints = typing.get_type_hints(request, include_extras=True)
    out = []
    for f in msgspec.structs.fields(request):
        tp, check, meta = unwrap(hints[f.name])
        required = f.default is msgspec.NODEFAULT and f.default_factory is msgspec.NODEFAULT
        out.append((f.name, tp, required, check, meta))
    return tuple(out)


def unwrap(tp: Any) -> tuple[Any, Check | None, msgspec.Meta | None]:
    """A field's type as (the type, its Check, its Meta): `Annotated[X, ...] | None` -> X."""
    args = get_args(tp)
    if get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        tp = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007
    check = meta = None
    if get_origin(tp) is typing.Annotated:
        base, *extras = get_args(tp)
        # Annotated[Annotated[T, a], b] is Annotated[T, a, b]: the outermost Check (last) wins,
        # the Metas add up (a shared type's bounds, the field's own description).
        check = next((x for x in reversed(extras) if isinstance(x, Check)), None)
        metas = [x for x in extras if isinstance(x, msgspec.Meta)]
        meta = _merged(metas) if metas else None
        tp = base
    return tp, check, meta


_META_ATTRS = ("gt", "ge", "lt", "le", "min_length", "max_length", "pattern", "description", "extra")


def _merged(metas: list[msgspec.Meta]) -> msgspec.Meta:
    kw: dict[str, Any] = {}
    for m in metas:
        kw.update({a: getattr(m, a) for a in _META_ATTRS if getattr(m, a) is not None})
    return msgspec.Meta(**kw)


def check_request(method: Method, params: dict[str, Any]) -> Request:
    """The typed request, or BadInput naming the field and what it allows."""
    for name, _tp, required, check, _meta in _fields(method.request):
        value = params.get(name)
        if value is None:
            if required:
                label = check.field if check is not None and check.field else name
                raise BadInput(f"{label} is required", field=label)
            continue
        if check is not None:
            check.run(value, name)
    try:
        return msgspec.convert(params, method.request)
    except msgspec.ValidationError as exc:
        raise _bad_input(method.request, params, str(exc)) from None


def _bad_input(request: type[Request], params: dict[str, Any], said: str) -> BadInput:
    m = _AT.search(said) or _MISSING.search(said)
    name = m.group(1) if m else None
    info = {f[0]: f for f in _fields(request)}
    if name is None or name not in info:
        return BadInput(f"bad request: {said}")
    _, tp, _req, _check, meta = info[name]
    if params.get(name) is None and _req:
        return BadInput(f"{name} is required", field=name)
    return describe(name, tp, meta, params.get(name), said)


def describe(name: str, tp: Any, meta: msgspec.Meta | None, value: Any, said: str) -> BadInput:
    """One wording for a value its type refuses, with the allowed values where the type knows them."""
    if get_origin(tp) is Literal:
        options = list(get_args(tp))
        shown = ", ".join(str(o) for o in options)
        return BadInput(f"{name} {value!r} is not one of {shown}", field=name, allowed=options)
    unit = f" of {meta.extra['unit']}" if meta is not None and (meta.extra or {}).get("unit") else ""
    low, high = _bounds(meta)
    if tp is bool:
        return BadInput(f"{name} must be true or false", field=name, allowed=[True, False])
    if tp is int:
        if low == "(0" and (high is None or (meta is not None and meta.le == 2**63 - 1)):
            return BadInput(f"{name} must be a positive integer", field=name)
        return BadInput(
            f"{name} must be an integer{_range(low, high)}", field=name, allowed=_allowed(low, high)
        )
    if tp is float:
        return BadInput(
            f"{name} must be a number{unit}{_range(low, high)}", field=name, allowed=_allowed(low, high)
        )
    if tp is str:
        return _bad_string(name, meta, value)
    origin = get_origin(tp) or tp
    if origin is list:
        return BadInput(f"{name} must be a list", field=name)
    if origin is dict:
        return BadInput(f"{name} must be a map", field=name)
    return BadInput(f"{name}: {said}", field=name)


def _bad_string(name: str, meta: msgspec.Meta | None, value: Any) -> BadInput:
    if meta is not None and meta.min_length and (not isinstance(value, str) or len(value) < meta.min_length):
        return BadInput(f"{name} must be a non-empty string", field=name)
    if not isinstance(value, str):
        return BadInput(f"{name} must be a string", field=name)
    if meta is not None and meta.max_length is not None and len(value) > meta.max_length:
        return BadInput(
            f"{name} is {len(value)} characters long; the limit is {meta.max_length}",
            field=name,
            allowed=f"at most {meta.max_length} characters",
        )
    pattern = meta.pattern if meta is not None else None
    return BadInput(f"{name} {value!r} is not allowed", field=name, allowed=pattern)


def _bounds(meta: msgspec.Meta | None) -> tuple[str | None, str | None]:
    if meta is None:
        return None, None
    low = (
        f"[{_num(meta.ge)}" if meta.ge is not None else (f"({_num(meta.gt)}" if meta.gt is not None else None)
    )
    high = (
        f"{_num(meta.le)}]" if meta.le is not None else (f"{_num(meta.lt)})" if meta.lt is not None else None)
    )
    return low, high


def _num(x: Any) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _range(low: str | None, high: str | None) -> str:
    if low is None and high is None:
        return ""
    return f" in {low or '(-inf'}, {high or 'inf)'}"


def _allowed(low: str | None, high: str | None) -> str | None:
    return None if low is None and high is None else f"{low or '(-inf'}, {high or 'inf)'}"
