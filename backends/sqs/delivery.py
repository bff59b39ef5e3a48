"""SQS side of the backend: delivery hints, held receipts, visibility = lease, hops.

SQS never decides anything: a hint ``{"j": job id, "r": ready time}`` only wakes a
worker, and what it finds is judged against the DynamoDB record. A receipt whose job
this process claimed follows the attempt: its visibility timeout is the lease (extended
by ``renew``), and ``finish`` deletes it. Delays longer than SQS's 15-minute ceiling
are *hops*: a hint that arrives before its job is due is re-sent for the remainder.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from backends.sqs.codec import Item
from backends.sqs.errors import error_code, translate
from queue_core.records.jobs import ClaimedJob, JobState

__all__ = ["MAX_DELAY_S", "Delivery", "sqs_name"]

MAX_DELAY_S = 900  # SQS DelaySeconds ceiling
MAX_VISIBILITY_S = 43_200
_RELEASE_S = 2  # visibility of prefetched receipts a claim did not use
_FINISHED = frozenset(s for s in JobState if s.finished)

Held = tuple[str, str]
"""A held message: (queue url, receipt handle)."""


def sqs_name(prefix: str, queue: str) -> str:
    """The SQS queue name of ``queue`` (sanitised; hashed when too long)."""
    raw = f"{prefix}-{queue}"
    clean = re.sub(r"[^A-Za-z0-9_-]", "_", raw)
    if clean != raw or len(clean) > 80:
        digest = hashlib.sha1(raw.encode()).hexdigest()[:10]
        clean = f"{clean[:69]}-{digest}"
    return clean


def _by_url(held: Sequence[Held]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for url, receipt in held:
        out.setdefault(url, []).append(receipt)
    return out


def _lease_s(ms: int) -> int:
    return min(MAX_VISIBILITY_S, max(1, math.ceil(ms / 1000)))


class Delivery:
    """The SQS queues of one prefix and the receipts this storage instance holds.

    Args:
        client: a boto3 SQS client.
        prefix: name prefix of the SQS queues (``<prefix>-<queue>``).
        visibility_s: default visibility timeout of queues it creates.
        hop_s: longest ``DelaySeconds`` of one hop.
        create: create missing queues.
        clock: epoch-ms clock (judging received hints).
        read_jobs: job id -> job item for the given ids (one BatchGetItem).
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str,
        visibility_s: int,
        hop_s: int,
        create: bool,
        clock: Callable[[], int],
        read_jobs: Callable[[Sequence[str]], dict[str, Item]],
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.visibility_s = visibility_s
        self.hop_s = hop_s
        self._create = create
        self._clock = clock
        self._read_jobs = read_jobs
        self._lock = threading.Lock()
        self._queue_urls: dict[str, str] = {}
        # SQS receipts this instance holds: job id -> (queue url, receipt handle)
        self._prefetched: dict[str, Held] = {}
        self._running: dict[str, Held] = {}
        self.closed = False

    # ------------------------------------------------------------------ queues and hints

    def queue_url(self, queue: str) -> str:
        """The URL of ``queue``'s SQS queue (created when missing and allowed)."""
        with self._lock:
            url = self._queue_urls.get(queue)
        if url is not None:
            return url
        name = sqs_name(self.prefix, queue)
        try:
            url = self.client.get_queue_url(QueueName=name)["QueueUrl"]
        except ClientError as exc:
            if (
                error_code(exc)
                not in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")
                or not self._create
            ):
                raise
            url = self.client.create_queue(
                QueueName=name,
                Attributes={
                    "VisibilityTimeout": str(self.visibility_s),
                    "MessageRetentionPeriod": str(14 * 24 * 3600),
                },
            )["QueueUrl"]
        with self._lock:
            self._queue_urls[queue] = url
        return str(url)

    def hint(self, items: Sequence[Item], now: int) -> None:
        """Send one delivery hint per queued job (SendMessageBatch of 10 per queue)."""
        by_queue: dict[str, list[Item]] = {}
        for it in items:
            by_queue.setdefault(it["q"], []).append(it)
        for q, its in by_queue.items():
            url = self.queue_url(q)
            for i in range(0, len(its), 10):
                entries = [
                    {
                        "Id": str(k),
                        "MessageBody": json.dumps({"j": it["id"], "r": it["ra"]}),
                        "DelaySeconds": self._delay_s(it["ra"], now),
                    }
                    for k, it in enumerate(its[i : i + 10])
                ]
                self.client.send_message_batch(QueueUrl=url, Entries=entries)

    def _delay_s(self, ready_at: int, now: int) -> int:
        return max(0, min(self.hop_s, math.ceil((ready_at - now) / 1000)))

    def _change_visibility(self, held: Sequence[Held], seconds: int) -> None:
        for url, receipts in _by_url(held).items():
            for i in range(0, len(receipts), 10):
                self.client.change_message_visibility_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(k), "ReceiptHandle": r, "VisibilityTimeout": seconds}
                        for k, r in enumerate(receipts[i : i + 10])
                    ],
                )

    def _delete(self, held: Sequence[Held]) -> None:
        for url, receipts in _by_url(held).items():
            for i in range(0, len(receipts), 10):
                self.client.delete_message_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(k), "ReceiptHandle": r}
                        for k, r in enumerate(receipts[i : i + 10])
                    ],
                )

    # ------------------------------------------------------------------ held receipts

    def bind_claimed(self, claimed: Sequence[ClaimedJob]) -> None:
        """Receipts of prefetched messages whose job was claimed now follow the attempt;
        the other prefetched receipts are released for a short while."""
        ids = {c.id for c in claimed}
        with self._lock:
            for job_id in ids & set(self._prefetched):
                self._running[job_id] = self._prefetched.pop(job_id)
            release = list(self._prefetched.values())
            self._prefetched.clear()
        if release:
            self._change_visibility(release, _RELEASE_S)

    def extend(self, job_ids: Iterable[str], lease_ms: int) -> None:
        """Visibility = lease: hide the held receipts of ``job_ids`` (and prefetched
        ones) for another ``lease_ms``."""
        with self._lock:
            held = [self._running[j] for j in job_ids if j in self._running]
            held += list(self._prefetched.values())
        if held:
            self._change_visibility(held, _lease_s(lease_ms))

    def forget(self, job_id: str) -> None:
        """Drop the receipt of an attempt that is no longer ours (it stays in SQS)."""
        with self._lock:
            self._running.pop(job_id, None)

    def release(self, job_ids: Iterable[str]) -> None:
        """Delete the held receipts of finished attempts."""
        with self._lock:
            held = [self._running.pop(j) for j in job_ids if j in self._running]
        if held:
            self._delete(held)

    def close(self) -> None:
        """Release prefetched receipts (visibility 0) so other workers see them now."""
        self.closed = True
        with self._lock:
            held = list(self._prefetched.values())
            self._prefetched.clear()
        self._change_visibility(held, 0)

    # ------------------------------------------------------------------ waiting

    def wait(self, queues: Sequence[str], timeout: float) -> bool:
        """Long-poll the queues' SQS queues for up to ``timeout`` seconds; see
        ``SQSStorage.wait_for_jobs``."""
        with translate("wait_for_jobs"):
            return self._wait(queues, timeout)

    def _wait(self, queues: Sequence[str], timeout: float) -> bool:
        if self.closed:
            return False
        deadline = time.monotonic() + max(0.0, timeout)
        wanted = list(dict.fromkeys(queues))
        if not wanted:
            time.sleep(max(0.0, timeout))
            return False
        with self._lock:
            if self._prefetched:
                return True
        while True:
            remaining = deadline - time.monotonic()
            per = int(max(0.0, min(20.0, remaining / len(wanted))))
            for q in wanted:
                url = self.queue_url(q)
                resp = self.client.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=per
                )
                msgs = resp.get("Messages", [])
                if msgs and self._handle(url, msgs):
                    return True
            if time.monotonic() >= deadline or self.closed:
                return False

    def _handle(self, url: str, msgs: Sequence[dict[str, Any]]) -> bool:
        """Judge received hints by their job items; whether one woke the caller."""
        now = self._clock()
        parsed: list[tuple[str, str]] = []
        delete: list[Held] = []
        for m in msgs:
            try:
                body = json.loads(m["Body"])
                job_id, _ = str(body["j"]), int(body["r"])
            except (ValueError, KeyError, TypeError):
                delete.append((url, m["ReceiptHandle"]))
                continue
            parsed.append((job_id, m["ReceiptHandle"]))
        jobs = self._read_jobs([p[0] for p in parsed]) if parsed else {}
        woke = False
        hops: list[Item] = []
        for job_id, receipt in parsed:
            job = jobs.get(job_id)
            if job is None or JobState(job["st"]) in _FINISHED:
                delete.append((url, receipt))
            elif job["st"] == "queued" and job.get("hd"):
                delete.append((url, receipt))  # moved aside by a pause: resume hints it
            elif job["st"] == "queued" and job["ra"] > now:
                hops.append(job)
                delete.append((url, receipt))
            elif job["st"] == "queued":
                with self._lock:
                    old = self._prefetched.get(job_id)
                    self._prefetched[job_id] = (url, receipt)
                if old is not None:
                    delete.append(old)
                woke = True
            else:  # running elsewhere: come back when its lease may have lapsed
                wait_ms = job.get("le", now) - now + 1000
                self._change_visibility([(url, receipt)], _lease_s(wait_ms))
        if hops:
            self.hint(hops, now)
        if delete:
            self._delete(delete)
        return woke
