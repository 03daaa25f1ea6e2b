"""The next generation's screens, run on workers the current generation leaves idle (issue 31).

At the end of a generation a worker often waits: for the generation's last screen or split on
the other worker, then for the driver to write the generation and propose the next one. In the
README job that was ~8% of the workers' time (~0.45 worker-s a generation, phase logs of
2026-11-29). Here those workers screen the programs the next generation would propose if the
rest of this one changed nothing: proposed from the state as it is, with the next generation's
own random stream (`Search._propose_ahead`), nothing of the search's own state touched.

Why the archive stays the same: a screen's result depends on its program alone, not on when or
where it ran. The next generation is still proposed afresh from the true state, and takes the
look-ahead's results only for the programs it proposes; it submits the others as before. A
guess the rest of the generation proved wrong (a last candidate that entered the frontier
changes the parents) costs only the idle time it ran in. Nothing of it is stored: a killed run
loses it as it loses any job in flight, and a resumed run proposes as an uninterrupted one.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from evaluator.records import Evaluation
from evolve.workers import Executor, Job

AHEAD_BATCH = -2  # the batch number of look-ahead jobs (the hand-over's are -1, the search's >= 0)
FLYING = object()  # `Lookahead.claim`: the program's screen is on a worker now


@dataclass
class Lookahead:
    """Screens proposed ahead for generation `target`: waiting to be submitted (`todo`, as
    (canonical hash, source, MAP-Elites cell)), on a worker (`flying`, by job) or back (`done`,
    by hash)."""
    pinned: bool = False  # the search's screens refuse unpinned programs (`RunConfig.pinned_only`)
    # the cascade's gate of a cell as it stands when the screen is handed out (`Job.gate`), or None
    gate: Callable[[str], dict | None] = lambda cell: None
    target: int = -1
    todo: list[tuple[str, str, str]] = field(default_factory=list)
    flying: dict[Job, tuple[int, str]] = field(default_factory=dict)  # job -> (its target, hash)
    done: dict[str, Evaluation] = field(default_factory=dict)
    submitted: int = 0  # look-ahead screens handed to workers (the run's counters)
    used: int = 0  # of them, results a generation took

    def start(self, target: int, programs: list[tuple[str, str, str]]) -> None:
        """Screen `programs` ((hash, source, cell), in proposal order) for generation `target`; a
        guess made again for the same generation keeps what the last one has back or running."""
        hashes = {h for h, _, _ in programs}
        running = {h for t, h in self.flying.values() if t == target}
        self.done = {h: ev for h, ev in self.done.items() if h in hashes} if target == self.target else {}
        self.target = target
        self.todo = [p for p in programs if p[0] not in self.done and p[0] not in running]

    def feed(self, pool: Executor) -> None:
        """Hand the next screens to workers that would otherwise sit idle: only while
        `pool.spare()`, so never ahead of a job of the current generation."""
        while self.todo and pool.spare() > 0:
            h, source, cell = self.todo.pop(0)
            job = Job(index=self.submitted, source=source, kind="screen", batch=AHEAD_BATCH, pinned=self.pinned,
                      gate=self.gate(cell))
            pool.submit(job)
            self.flying[job] = (self.target, h)
            self.submitted += 1

    def arrived(self, job: Job) -> tuple[int | None, str | None]:
        """A look-ahead job is back: (the generation it was proposed for, its program's hash)."""
        return self.flying.pop(job, (None, None))

    def keep(self, target: int | None, h: str | None, ev: Evaluation) -> None:
        """A result no generation waits for now: kept while its generation is still to come."""
        if target is not None and target == self.target:
            self.done[h] = ev

    def claim(self, h: str, generation: int):
        """Generation `generation`'s screen of program `h`: its result, FLYING (on a worker:
        wait for it), or None (screen it as usual)."""
        if h in self.done and generation == self.target:
            self.used += 1
            return self.done.pop(h)
        if (generation, h) in self.flying.values():
            return FLYING
        return None

    def begin(self, generation: int) -> None:
        """Generation `generation` has claimed what it proposed: the screens proposed for it and
        not handed to a worker yet are dropped."""
        if self.target == generation:
            self.todo = []

    def end(self, generation: int) -> None:
        """Generation `generation` is written: its unclaimed results are dropped (its screens
        still on a worker come back and are dropped then)."""
        if self.target <= generation:
            self.target, self.todo, self.done = -1, [], {}
