"""The lab's fio report reader: the JSON past fio's notices, and a missing report said as such."""

from __future__ import annotations

import json

import pytest

from nodeos_devtools.lab import fio


def test_the_first_job_is_read_past_a_notice_fio_wrote_ahead_of_the_report() -> None:
    report = json.dumps({"jobs": [{"jobname": "verify", "error": 0}, {"jobname": "other"}]})
    job = fio.report_job("fio: terminating on signal 2\n" + report)
    assert job == {"jobname": "verify", "error": 0}


NOT_REPORTS = [
    "",
    "fio: pid=501, got signal=13\n",
    '{"jobs": []}',
    '{"fio version": "3.39"}',
    '{"jobs": [{"jo',
]


@pytest.mark.parametrize("text", NOT_REPORTS)
def test_no_report_is_a_value_error_naming_what_fio_left(text: str) -> None:
    with pytest.raises(ValueError, match="not a fio report"):
        fio.report_job(text)
