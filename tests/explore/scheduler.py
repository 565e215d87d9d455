"""A deterministic scheduler for actors that run as threads, one at a time.

Why threads: the explorer must run the project's real, synchronous list, store and applier code
unmodified, so it cannot turn that code into coroutines. Each actor is a thread, but a baton (one
semaphore per actor, one back to the scheduler) lets exactly one of them run at a time. The
running actor hands the baton back at every *yield point* (every call through a ``Proxy``, every
virtual sleep) and the scheduler picks who goes next with its seeded ``random.Random``. Nothing
else decides the order, so a schedule is a pure function of its seed and replays identically,
which is what makes a failure worth printing: its seed reproduces it.

This module knows nothing about the project: what a call means is for the adapter to say.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field
from typing import Any

# A call that does not come back within this many wall-clock seconds means an actor blocked
# inside real I/O while holding the baton (e.g. a lock held by a paused actor): a hang, reported
# as such. Generous, because the machine is shared; never part of a verdict otherwise.
HANG_S = 60.0


class Aborted(BaseException):
    """Raised inside an actor at its next yield point once a schedule runs past its step
    budget (a livelock, or a wait loop spinning on the virtual clock): a BaseException so that
    the code under test cannot swallow it in an ``except Exception``."""


class Hang(RuntimeError):
    """An actor did not reach its next yield point: it blocked on real I/O."""


@dataclass(slots=True)
class Step:
    """One scheduling decision: ``actor`` was let through to make ``call``."""

    index: int
    actor: str
    call: str
    args: tuple[Any, ...] = ()
    result: Any = None
    done: bool = False  # the call returned (it may have raised instead)


@dataclass(slots=True)
class Actor:
    name: str
    body: Callable[[], None]
    wake_at: int = 0  # not eligible before this step: lets a passive actor act late
    go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    started: bool = False
    done: bool = False
    error: BaseException | None = None
    pending: str = ""  # the call it is stopped before
    pending_args: tuple[Any, ...] = ()
    # An opportunist (a fault) poised at a write is chosen only for a conflict (see
    # ``conflict``) until ``patience`` steps after it woke: it strikes when it matters.
    opportunist: bool = False
    patience: int = 0


def snapshot(value: Any) -> Any:
    """A copy of a call argument that later mutation cannot change (the trace must show what
    was passed); iterators are materialised by ``Proxy`` before this sees them."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, KeysView | ValuesView | set | frozenset):
        return list(value)
    return value


class Scheduler:
    """Runs actors one at a time, choosing the next one at every yield point.

    Three strategies, picked per schedule by the seed:
    - ``random``: a uniform choice at every step (fine-grained interleavings);
    - ``sticky``: the running actor goes on with a probability drawn per schedule, else
      another is chosen uniformly; but right after a call that ``is_read`` says read shared
      state, the actor is preempted with a (high) probability drawn per schedule. Most races
      are read-then-act: one actor stopped between reading the truth (the store, an index, a
      lease) and acting on it, while another runs a whole sequence (a removal and its
      invalidation, a rollover); uniform choice rarely lets one actor run many steps in a row,
      and rarely stops one at the moment that matters;
    - ``conflict``: ``sticky``, but the actor that takes over is, with a probability drawn
      per schedule, one whose next call (known: every paused actor is stopped just before a
      call) conflicts with the call just made: after a read, a write (preferably to what was
      read: their ``footprint``s meet); after a write, a read of what was written. Read,
      someone else's write to it, act: the shape of every stale-read race, made common
      instead of lucky.
    (PCT-style priority schedules were tried too and found nothing the others did not.)
    ``serial`` runs the actors one after the other, for checking the explorer itself."""

    def __init__(
        self,
        rng: random.Random,
        max_steps: int = 6000,
        strategy: str | None = None,
        is_read: Callable[[str], bool] | None = None,
        is_write: Callable[[str], bool] | None = None,
        footprint: Callable[[str, tuple[Any, ...]], frozenset[str] | None] | None = None,
    ) -> None:
        self.rng = rng
        self.max_steps = max_steps
        self.strategy = strategy or rng.choice(
            ["random", "sticky", "sticky", "conflict", "conflict"]
        )
        self.stickiness = rng.uniform(0.6, 0.9)
        self.preempt_after_read = rng.uniform(0.4, 0.9)
        self.write_first = rng.uniform(0.5, 0.95)
        self._is_read = is_read or (lambda call: False)
        self._is_write = is_write or (lambda call: False)
        self._footprint = footprint or (lambda call, args: None)
        self.steps: list[Step] = []
        self.clock = 0.0  # virtual seconds: advanced only by ``sleep``
        self.aborted = False
        self._actors: list[Actor] = []
        self._by_thread: dict[int, Actor] = {}
        self._back = threading.Semaphore(0)
        self._current: Actor | None = None
        self._last: Step | None = None  # the last yield point let through (not a note)
        self.previous: Step | None = None  # the one before it: what preceded the running call

    # -- setting up -------------------------------------------------------------------------------

    def spawn(
        self, name: str, body: Callable[[], None], wake_at: int = 0, patience: int = 0
    ) -> None:
        """``patience`` > 0 makes the actor an opportunist (see ``Actor``)."""
        self._actors.append(Actor(name, body, wake_at, opportunist=patience > 0, patience=patience))

    # -- called from actor threads ----------------------------------------------------------------

    def current(self) -> str | None:
        actor = self._by_thread.get(threading.get_ident())
        return actor.name if actor else None

    def pause(self, call: str, args: tuple[Any, ...] = ()) -> Step | None:
        """A yield point: give the baton back and wait to be chosen; then the caller makes
        ``call``. Outside an actor thread (setup, checks) this does nothing."""
        actor = self._by_thread.get(threading.get_ident())
        if actor is None:
            return None
        if self.aborted:
            raise Aborted(call)
        actor.pending, actor.pending_args = call, args
        self._back.release()
        actor.go.acquire()
        if self.aborted:
            raise Aborted(call)
        step = Step(len(self.steps), actor.name, call, tuple(map(snapshot, args)))
        self.steps.append(step)
        self.previous, self._last = self._last, step
        return step

    def note(self, call: str, args: tuple[Any, ...] = ()) -> None:
        """A line in the trace that is not a yield point (what an actor is about to do):
        it changes nothing shared, so stopping there would only dilute the interleavings."""
        actor = self._by_thread.get(threading.get_ident())
        if actor is not None:
            self.steps.append(Step(len(self.steps), actor.name, call, args, done=True))

    def sleep(self, seconds: float) -> None:
        """``time.sleep`` made virtual: a yield point that advances the virtual clock, so a
        wait loop with a deadline ends after the same number of steps in every replay. The
        sleeper is never chosen next if anyone else can run (it waits for someone)."""
        self.clock += seconds
        self.pause("sleep")

    def monotonic(self) -> float:
        return self.clock

    def idle_until(self, step: int) -> None:
        """Let other actors run until the schedule reaches ``step`` (a passive actor, such
        as an evictor, acting late rather than only at the start), without spending steps."""
        actor = self._by_thread.get(threading.get_ident())
        if actor is not None and step > len(self.steps):
            actor.wake_at = step
            self.pause("wake")

    # -- the scheduling loop ----------------------------------------------------------------------

    def run(self) -> None:
        """Run every actor to completion. Raises ``Hang`` if one blocks on real I/O."""
        threads = []
        for actor in self._actors:
            thread = threading.Thread(
                target=self._main, args=(actor,), name=f"explore-{actor.name}", daemon=True
            )
            threads.append(thread)
            thread.start()
        while True:
            live = [a for a in self._actors if not a.done]
            if not live:
                break
            actor = self._choose(live)
            if len(self.steps) >= self.max_steps:
                self.aborted = True  # every actor unwinds at its next yield point
            self._current = actor
            actor.go.release()
            if not self._back.acquire(timeout=HANG_S):
                self.aborted = True
                raise Hang(f"{actor.name} did not yield within {HANG_S}s")
        for thread in threads:
            thread.join()

    def errors(self) -> list[tuple[str, BaseException]]:
        return [(a.name, a.error) for a in self._actors if a.error is not None]

    def _choose(self, live: list[Actor]) -> Actor:
        now = len(self.steps)
        awake = [a for a in live if a.wake_at <= now]
        if not awake:  # everyone left is waiting for a later step: jump to the earliest
            first = min(a.wake_at for a in live)
            awake = [a for a in live if a.wake_at == first]
        if self.strategy == "serial":  # one actor at a time, to completion: the sanity check
            return awake[0]
        contenders = awake
        if self.strategy == "conflict":
            contenders = [a for a in awake if not self._waiting(a, now)] or awake
        current, last = self._current, self._last
        others = [a for a in contenders if a is not current]
        if last is not None and last.call == "sleep" and others:
            return self.rng.choice(others)
        if self.strategy == "random" or current is None or current not in contenders:
            return self.rng.choice(contenders)
        just_read = last is not None and last.actor == current.name and self._is_read(last.call)
        stay = 1.0 - self.preempt_after_read if just_read else self.stickiness
        if not others or self.rng.random() < stay:
            return current
        if (
            self.strategy == "conflict"
            and last is not None
            and last.actor == current.name
            and self.rng.random() < self.write_first
        ):
            touched = self._footprint(last.call, last.args)
            rivals = [a for a in awake if a is not current]
            if just_read:  # someone else's write to what was read
                next_up = [a for a in rivals if self._is_write(a.pending)]
            else:  # someone else reading what was written
                next_up = [a for a in rivals if self._is_read(a.pending)]
            conflicting = [a for a in next_up if self._meets(touched, a)]
            fallback = [a for a in next_up if not self._waiting(a, now)] if just_read else []
            if conflicting or fallback:
                return self.rng.choice(conflicting or fallback)
        return self.rng.choice(others)

    def _waiting(self, actor: Actor, now: int) -> bool:
        """An opportunist still waiting for its moment."""
        return (
            actor.opportunist
            and self._is_write(actor.pending)
            and now < actor.wake_at + actor.patience
        )

    def _meets(self, touched: frozenset[str] | None, actor: Actor) -> bool:
        """The actor's next call touches what was just touched (None: may touch anything)."""
        other = self._footprint(actor.pending, actor.pending_args)
        return touched is None or other is None or bool(touched & other)

    def _main(self, actor: Actor) -> None:
        self._by_thread[threading.get_ident()] = actor
        actor.go.acquire()
        actor.started = True
        self.steps.append(Step(len(self.steps), actor.name, "start", done=True))
        try:
            if not self.aborted:
                actor.body()
        except BaseException as exc:  # reported by the explorer, never lost in a thread
            actor.error = exc
        finally:
            actor.done = True
            self._back.release()


class Proxy:
    """Makes every public method call on ``target`` a yield point of ``scheduler``, recorded
    as a step named ``{name}.{method}`` with its arguments and result. Attribute reads that
    are not calls pass through. ``normalize`` may rewrite a result into an equivalent canonical
    form (e.g. a dict in the order of the keys asked for, not in whatever order the servers
    answered), so that nothing downstream depends on things a seed does not fix; ``observe``
    sees every completed call (the explorer uses it to learn which keys exist). A call that
    ``idle`` says touches nothing (a batch of no keys) is made without a yield point: it
    cannot race anything, and the steps it would take only dilute the interleavings."""

    def __init__(
        self,
        target: Any,
        scheduler: Scheduler,
        name: str,
        observe: Callable[[str, tuple[Any, ...], Any], None] | None = None,
        normalize: Callable[[str, tuple[Any, ...], Any], Any] | None = None,
        idle: Callable[[str, tuple[Any, ...]], bool] | None = None,
    ) -> None:
        self._target = target
        self._scheduler = scheduler
        self._name = name
        self._observe = observe
        self._normalize = normalize
        self._idle = idle

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if attr.startswith("_") or not callable(value):
            return value
        scheduler, name, observe, normalize, idle = (
            self._scheduler,
            self._name,
            self._observe,
            self._normalize,
            self._idle,
        )

        def call(*args: Any, **kwargs: Any) -> Any:
            # A generator argument would be consumed by the record: materialise it first.
            args = tuple(list(a) if isinstance(a, Iterator) else a for a in args)
            if idle is not None and idle(attr, args):
                return value(*args, **kwargs)
            step = scheduler.pause(f"{name}.{attr}", args)
            result = value(*args, **kwargs)
            if normalize is not None:
                result = normalize(attr, args, result)
            if step is not None:
                step.result = snapshot(result)
                step.done = True
            if observe is not None:
                observe(attr, args, result)
            return result

        return call
