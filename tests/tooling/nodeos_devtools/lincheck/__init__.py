"""Linearizability checker: histories, models and a Wing & Gong / porcupine-style search."""

from nodeos_devtools.lincheck.checker import (
    DEFAULT_MAX_STATES,
    LINEARIZABLE,
    NOT_LINEARIZABLE,
    UNKNOWN_VERDICT,
    Result,
    check,
)
from nodeos_devtools.lincheck.history import UNKNOWN, Op, parse_history
from nodeos_devtools.lincheck.model import KV, MODELS, REGISTER, Model

__all__ = [
    "KV",
    "LINEARIZABLE",
    "MODELS",
    "NOT_LINEARIZABLE",
    "REGISTER",
    "UNKNOWN",
    "UNKNOWN_VERDICT",
    "Model",
    "Op",
    "Result",
    "check",
    "check_text",
    "parse_history",
]


def check_text(
    model_name: str, text: str, timeout: float | None = None, max_states: int = DEFAULT_MAX_STATES
) -> Result:
    model = MODELS[model_name]
    return check(model, parse_history(text, model.functions), timeout=timeout, max_states=max_states)
