# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the batch forms of the VM modules share: the refusal of an invalid batch, bounded concurrency, and the
task's result and message from the per-VM results (pure apart from the threads)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, TypeVar, Union

from ansible_collections.gpuops.provision.plugins.module_utils._common import disruption

T = TypeVar("T")
R = TypeVar("R")


class BatchInvalid(Exception):
    """One or more VMs of a batch cannot be done; nothing was written. ``problems``: one message per VM."""

    def __init__(self, problems: list[str]) -> None:
        Exception.__init__(self, "; ".join(problems))
        self.problems = problems


def invalid_message(exc: BatchInvalid, batch: bool) -> str:
    """The task's message for a BatchInvalid: the one problem, or how many VMs and each of them."""
    if batch and len(exc.problems) > 1:
        return "%d VMs cannot be configured, nothing changed: %s" % (len(exc.problems), exc)
    return str(exc)


def pool_map(func: Callable[[T], R], items: Sequence[T], workers: int,
             catch: tuple[type[BaseException], ...]) -> list[Union[R, BaseException]]:
    """``[func(item) for item in items]`` with up to ``workers`` at a time. Exceptions of the ``catch`` types are
    returned in their item's place; anything else is a bug and propagates (after the calls already started end)."""
    def call(item: T) -> Union[R, BaseException]:
        try:
            return func(item)
        except catch as exc:
            return exc
    if workers <= 1 or len(items) <= 1:
        return [call(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(call, items))


def outcome(results: Sequence[dict[str, Any]], ident: str, header: Callable[[dict[str, Any]], str],
            diffs: Optional[Sequence[Optional[Mapping[str, Any]]]] = None) -> tuple[dict[str, Any], Optional[str]]:
    """(task result, failure message or None) of a batch from its per-VM results, in the task's order.

    ``ident``: the key naming a VM in its result; ``header(result)``: the diff header of a VM; ``diffs``: one
    ``{before, after}`` (or None) per result, for diff mode. Each VM's ``disruptions`` (power cycles, restarts) stay
    in its result; the task's ``disruptions`` are all of them in the task's order, and lead its diff.
    """
    failed = [r for r in results if r.get("failed")]
    disruptions = disruption.flatten(results)
    out = dict(changed=any(r["changed"] for r in results), vms=results, failed_vms=[r[ident] for r in failed],
               disruptions=disruptions)
    if diffs is not None:
        out["diff"] = disruption.diff_first(disruptions, [dict(d, before_header=header(r), after_header=header(r))
                                                          for r, d in zip(results, diffs) if d is not None])
    if not failed:
        return out, None
    skipped = [str(r[ident]) for r in results if r.get("skipped")]
    rest = "not started (stop_on_error): VMs %s" % ", ".join(skipped) if skipped else "the other VMs are done"
    return out, "%d of %d VMs failed: %s; %s" % (len(failed), len(results), "; ".join(r["msg"] for r in failed), rest)
