"""T0: the Compose suite's stack fixture (tests/compose/conftest.py `stack_up`, around pytest-docker's executor)
brings the stack down however `up` ends: pytest-docker 3.2.6 runs its setup before the try that cleans up, so a
failed `up` used to leave the project's containers behind. A failed `up` fails the fixture with the stack's logs, the
key masked. A recording stand-in replaces `docker compose`."""

from __future__ import annotations

import pytest

from tests.compose.conftest import stack_up

KEY = "k3y-0f-the-test-stack"
SETUP, CLEANUP = ["up -d"], ["down -v --timeout 10"]


class Compose:
    """pytest-docker's `execute`: records each subcommand; `fail_up` raises what a failed `up` raises there."""

    def __init__(self, fail_up: BaseException | None = None) -> None:
        self.fail_up = fail_up
        self.calls: list[str] = []

    def execute(self, subcommand: str, **kwargs: object) -> bytes:
        self.calls.append(subcommand.split()[0])
        if subcommand.startswith("up") and self.fail_up is not None:
            raise self.fail_up
        if subcommand.startswith("logs"):
            return f"sglang-1  | launcher: --api-key {KEY}\ncheck-1  | unknown mode 'turbo'\n".encode()
        return b""


def test_a_failed_up_brings_the_stack_down_and_fails_with_its_logs_masked():
    compose = Compose(fail_up=Exception(f'Command docker compose up -d returned 1: """dependency failed {KEY}""".'))
    with pytest.raises(pytest.fail.Exception) as failed, stack_up(compose.execute, SETUP, CLEANUP, KEY):
        pytest.fail("the block ran after a failed up")
    assert compose.calls == ["up", "logs", "down"]
    message = str(failed.value)
    assert "returned 1" in message and "unknown mode 'turbo'" in message, message
    assert KEY not in message and "--api-key ********" in message, message


def test_ctrl_c_during_up_brings_the_stack_down():
    compose = Compose(fail_up=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt), stack_up(compose.execute, SETUP, CLEANUP, KEY):
        pytest.fail("the block ran after an interrupted up")
    assert compose.calls == ["up", "down"]


def test_the_stack_is_up_for_the_block_and_down_after_it_whatever_the_block_raised():
    compose = Compose()
    with pytest.raises(RuntimeError), stack_up(compose.execute, SETUP, CLEANUP, KEY):
        assert compose.calls == ["up"]
        raise RuntimeError("a test's fixture failed")
    assert compose.calls == ["up", "down"]
