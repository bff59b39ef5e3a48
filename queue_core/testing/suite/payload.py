"""Contract: payloads, results and text are carried exactly; close is idempotent."""

from __future__ import annotations

import os
import secrets

from queue_core.records.jobs import JobState
from queue_core.storage.abilities import SupportsStepInputsBatch
from queue_core.storage.protocol import Storage
from queue_core.testing.fixtures import (
    SEC,
    T0,
    claim_one,
    complete_end,
    dead_end,
    enqueue_one,
    error_info,
    retry_end,
)
from queue_core.testing.suite._base import ContractBase, job_of, result_size
from queue_core.testing.suite._flows_base import (
    claim_steps,
    flows_of,
    make_execution,
    make_spec,
)

NOT_UTF8 = b"\xff\xfe\x00\x80\xc3(\xa0\xa1\xe2\x28\xa1\x00\x00\xf0\x28\x8c\xbc"
"""Bytes that are not valid UTF-8, with NULs (catches text columns and C strings)."""
LARGE = 200 * 1024


class PayloadContract(ContractBase):
    """Opaque bytes and unicode text round-trip exactly."""

    def test_large_payload_round_trips(self, storage: Storage) -> None:
        """200 KiB is the size every backend must carry (DynamoDB items stop at 400 KB)."""
        payload = os.urandom(LARGE - 262) + b"\"'\\\n\r\t" + bytes(range(256))
        assert len(payload) == LARGE
        job_id = enqueue_one(storage, payload=payload)
        assert job_of(storage, job_id).payload == payload
        assert claim_one(storage, now=T0).payload == payload

    def test_payload_that_is_not_utf8_round_trips(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, payload=NOT_UTF8)
        got = claim_one(storage, now=T0)
        assert got.payload == NOT_UTF8
        storage.finish([dead_end(got.ref)], now=T0)
        dead_id = job_of(storage, job_id).dead_id
        assert dead_id is not None
        entry = storage.get_dead(dead_id)
        assert entry is not None and entry.payload == NOT_UTF8
        new_id = storage.retry_dead(dead_id, now=T0 + SEC)
        assert claim_one(storage, now=T0 + SEC).payload == NOT_UTF8
        assert job_of(storage, new_id).payload == NOT_UTF8

    def test_empty_payload_and_empty_result_round_trip(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, payload=b"")
        got = claim_one(storage, now=T0)
        assert got.payload == b""
        storage.finish([complete_end(got.ref, b"")], now=T0)
        rec = job_of(storage, job_id)
        assert (rec.payload, rec.result) == (b"", b"")

    def test_result_bytes_round_trip_exactly(self, storage: Storage) -> None:
        job_id = enqueue_one(storage)
        got = claim_one(storage, now=T0)
        result = NOT_UTF8 + os.urandom(64 * 1024)
        storage.finish([complete_end(got.ref, result)], now=T0)
        assert job_of(storage, job_id).result == result

    def test_results_of_a_megabyte_round_trip(self, storage: Storage) -> None:
        """1 MiB results (DynamoDB items stop at 400 KB, its transactions at 4 MB), three
        ended in one call: each is stored whole, none lost to its neighbours' size."""
        size = result_size(storage)
        ids = [enqueue_one(storage) for _ in range(5)]
        got = storage.claim("w1", ["default"], 5, 30_000, now=T0)
        results = {j.id: os.urandom(size) for j in got}
        ends = [complete_end(j.ref, results[j.id]) for j in got]
        assert storage.finish(ends, now=T0 + 1) == [True] * 5
        for job_id in ids:
            rec = job_of(storage, job_id)
            assert (rec.state, rec.result) == (JobState.SUCCEEDED, results[job_id])

    def test_large_payloads_dead_lettered_together_are_all_kept(self, storage: Storage) -> None:
        """24 jobs of 200 KiB ended dead in one call: every entry keeps its payload (their
        dead-letter entries hold 4.8 MB together, more than one DynamoDB transaction)."""
        payloads = {enqueue_one(storage, payload=os.urandom(LARGE)): b"" for _ in range(24)}
        for job_id in payloads:
            payloads[job_id] = job_of(storage, job_id).payload
        got = storage.claim("w1", ["default"], 24, 30_000, now=T0)
        assert storage.finish([dead_end(j.ref) for j in got], now=T0 + 1) == [True] * 24
        for job_id, payload in payloads.items():
            dead_id = job_of(storage, job_id).dead_id
            entry = storage.get_dead(dead_id or "")
            assert entry is not None and entry.payload == payload

    def test_a_step_result_of_a_megabyte_is_the_next_steps_input(self, storage: Storage) -> None:
        """A flow step's large result reaches the steps after it whole, read alone and in
        a batch (a step's end stores it twice on some storages: result and output)."""
        flows = flows_of(storage)
        new, big = (
            make_execution(make_spec({"a": [], "b": ["a"]})),
            os.urandom(result_size(storage)),
        )
        flows.start_execution(new, now=T0)
        a = claim_steps(storage, T0 + 1)["a"]
        assert storage.finish([complete_end(a.ref, big)], now=T0 + 2) == [True]
        assert flows.get_step_inputs(new.id, "b").results == {"a": big}
        if isinstance(storage, SupportsStepInputsBatch):
            got = storage.get_step_inputs_batch([(new.id, "b")])
            assert got[0] is not None and got[0].results == {"a": big}

    def test_a_long_history_of_large_errors_reaches_the_dead_letter_store(
        self, storage: Storage
    ) -> None:
        """40 attempts, each with a 12 KB traceback and a 4 KB message that do not
        compress: the dead-letter entry keeps every record whole, and replays."""
        job_id = enqueue_one(storage, max_attempts=40)
        sent = []
        for n in range(1, 41):
            got = claim_one(storage, now=T0 + n * SEC)
            err = error_info(
                "ValueError", secrets.token_hex(2048), traceback=secrets.token_hex(6144)
            )
            sent.append(err)
            end = (
                dead_end(got.ref, dead_reason="retries_exhausted", error=err)
                if n == 40
                else (retry_end(got.ref, 0, error=err))
            )
            assert storage.finish([end], now=T0 + n * SEC + 1) == [True]
        dead_id = job_of(storage, job_id).dead_id
        assert dead_id is not None
        entry = storage.get_dead(dead_id)
        assert entry is not None and len(entry.attempts) == 40
        kept = [(a.number, a.message, a.traceback) for a in entry.attempts]
        assert kept == [(n, e.message, e.traceback) for n, e in enumerate(sent, 1)]
        assert [d.id for d in storage.list_dead()] == [dead_id]
        storage.retry_dead(dead_id, now=T0 + 100 * SEC)
        assert storage.get_dead(dead_id) is None and storage.list_dead() == []

    def test_complete_without_result_stores_none(self, storage: Storage) -> None:
        job_id = enqueue_one(storage)
        got = claim_one(storage, now=T0)
        storage.finish([complete_end(got.ref, None)], now=T0)  # type: ignore[arg-type]
        rec = job_of(storage, job_id)
        assert (rec.state, rec.result) == (JobState.SUCCEEDED, None)

    def test_unicode_names_and_json_payload_round_trip(self, storage: Storage) -> None:
        payload = '{"args":["żółć ✓ 日本語 🎉"],"kwargs":{"ключ":"значение"}}'.encode()
        job_id = enqueue_one(storage, task_name="tâche.envoyer_✉", queue="ёлка-🎄", payload=payload)
        got = claim_one(storage, now=T0, queues=["ёлка-🎄"])
        assert (got.id, got.task_name, got.payload) == (job_id, "tâche.envoyer_✉", payload)
        storage.finish([dead_end(got.ref)], now=T0)
        entry = storage.list_dead(task_name="tâche.envoyer_✉")[0]
        assert entry.queue == "ёлка-🎄"
        assert entry.args == ("żółć ✓ 日本語 🎉",)
        assert entry.kwargs == {"ключ": "значение"}

    def test_error_text_round_trips(self, storage: Storage) -> None:
        job_id = enqueue_one(storage, max_attempts=2)
        got = claim_one(storage, now=T0, worker_id="wörker-✓")
        tb = "Traceback (most recent call last):\n" + "  línea ✓\n" * 200 + "ValueError: ✗\n"
        err = error_info("ValueError", "bad 'quote' \"double\" \\ ✗\n\ttab", traceback=tb)
        storage.finish([retry_end(got.ref, 0, error=err)], now=T0)
        attempt = storage.list_attempts(job_id)[0]
        assert (attempt.message, attempt.traceback, attempt.worker_id) == (
            err.message,
            tb,
            "wörker-✓",
        )
        assert job_of(storage, job_id).error == err

    def test_options_text_round_trips(self, storage: Storage) -> None:
        options = '{"timeout": 1.5, "note": "ünï ✓", "nested": {"a": [1, 2, null]}}'
        job_id = enqueue_one(storage, options=options)
        assert job_of(storage, job_id).options == options
        assert claim_one(storage, now=T0).options == options

    def test_close_is_idempotent(self, storage: Storage) -> None:
        storage.close()
        storage.close()
