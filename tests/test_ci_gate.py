"""Under CI a run cannot go green by skipping (provmw.ci): what fails it, and what does not."""

from __future__ import annotations

import pytest

from provmw.ci import SERVICE_MISSING, in_ci

pytest_plugins = ["pytester"]

PASSING = "def test_passes():\n    assert True\n"
MISSING_SKIP = f"import pytest\ndef test_redis():\n    pytest.skip('{SERVICE_MISSING} no Redis')\n"
MARKED_SKIP = "import pytest\n@pytest.mark.redis\ndef test_marked():\n    pytest.skip('elsewhere')\n"
FIXTURE = ("from provmw.ci import service_missing\n"
           "def test_needs_a_server():\n    service_missing('no Redis at 127.0.0.1:1')\n")


def run(pytester: pytest.Pytester, ci: str, *sources: str) -> pytest.RunResult:
    """Run ``sources`` as test files in a pytest of their own, with ``CI`` set to ``ci``."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\nmarkers =\n    redis: needs Redis\n")
    for i, source in enumerate(sources):
        pytester.makepyfile(**{f"test_{i}": source})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CI", ci)
        return pytester.runpytest_inprocess("-p", "provmw.ci", "-p", "no:cacheprovider")


@pytest.mark.parametrize("value", ["1", "true", "True", "yes", "on"])
def test_a_true_looking_ci_value_is_ci(value: str) -> None:
    assert in_ci({"CI": value})


@pytest.mark.parametrize("value", ["", "0", "false", "no"])
def test_anything_else_is_not_ci(value: str) -> None:
    assert not in_ci({"CI": value})


def test_a_missing_service_fails_its_test_under_ci(pytester: pytest.Pytester) -> None:
    assert run(pytester, "1", FIXTURE, PASSING).ret == pytest.ExitCode.TESTS_FAILED


def test_a_skip_for_a_missing_service_fails_the_run_under_ci(pytester: pytest.Pytester) -> None:
    result = run(pytester, "1", MISSING_SKIP, PASSING)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["CI: 1 tests skipped for a missing service*"])


def test_a_service_whose_tests_all_skipped_fails_the_run_under_ci(pytester: pytest.Pytester) -> None:
    result = run(pytester, "yes", MARKED_SKIP, PASSING)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["CI: 1 redis tests ran and none passed*"])


def test_a_run_in_which_no_test_passed_fails_under_ci(pytester: pytest.Pytester) -> None:
    result = run(pytester, "true", "import pytest\n@pytest.mark.skip('why not')\ndef test_x():\n    pass\n")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["CI: no test passed*"])


def test_the_same_runs_skip_quietly_outside_ci(pytester: pytest.Pytester) -> None:
    assert run(pytester, "", FIXTURE, MISSING_SKIP, MARKED_SKIP, PASSING).ret == pytest.ExitCode.OK
