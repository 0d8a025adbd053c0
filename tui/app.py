"""The live screen: a Textual `top` for RL training. Reads only the msgpack ring."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from rlscope_top.report.view import ViewModel
from rlscope_top.vocab import CATEGORIES, LABELS, NA_TEXT, STEAL_SHOWN_PCT, fmt

# Okabe-Ito colours (distinguishable with colour-blindness) plus a glyph per category,
# so the stacked bar reads without colour too.
STYLE = {"python": ("#56B4E9", "█"), "simulator": ("#009E73", "▒"), "backend": ("#E69F00", "▓"),
         "cuda_api": ("#CC79A7", "░"), "gpu": ("#D55E00", "▞")}
SPARK = "▁▂▃▄▅▆▇█"
SORTS = {  # per table: (label, key of the row's data); the first is the default
    "threads": [("on-CPU", "on_cpu_s"), ("off-CPU", "off_cpu_s"), ("Python", "python_s"),
                ("native", "native_s"), ("Backend", "backend_s"), ("TID", "tid")],
    "cats": [("stack order", None), ("time", "seconds")],
    "ops": [("wall", "wall_share"), ("calls/s", "calls_per_s"), ("trans/s", "transitions_per_s")],
    "procs": [("on-CPU", "on_cpu_s"), ("Sim", "simulator_s"), ("Python", "python_s"), ("waiting", "waiting_s"),
              ("PID", "pid")],
}
HELP = """[b]rlscope-top keys[/b]

  q  quit: detach, print and write the summary
  p  pause / resume the display (collection goes on)
  s  write a snapshot summary now
  o  change the sort column of the focused table (tab moves focus)
  enter  details of the selected row
  f  categories of the selected process / of the whole job again
  r  reset the counters shown (the summary keeps everything)
  g  time GPU kernels: inject the GPU agent (asks first; attach only)
  ?  this help

Bars: █ Python  ▒ Simulator  ▓ Backend  ░ CUDA API  ▞ GPU
Sources: exact (probes), estimated (overhead budget), n/a (not measured)"""


REPLAY_KEYS = "  space  play / pause    [ ]  back / forward 10 s    + -  faster / slower"


def stacked_bar(shares: dict, width: int) -> Text:
    """A bar split by category share, coloured and patterned."""
    out, used = Text(), 0
    for cat in ("python", "simulator", "backend", "cuda_api"):
        n = max(0, min(round((shares.get(cat) or 0.0) * width), width - used))
        colour, glyph = STYLE[cat]
        out.append(glyph * n, style=colour)
        used += n
    out.append("·" * (width - used), style="dim")
    return out


def spark(values: list[float], width: int = 16) -> str:
    """A text sparkline of the last `width` values (0-100)."""
    vals = values[-width:]
    return "".join(SPARK[min(7, int(v / 100 * 7.999))] for v in vals)


def _refill(t: DataTable, rows: list[tuple[str, tuple]]) -> None:
    """Replace a table's rows ((key, cells) pairs), keeping the cursor on the same row by key:
    a refresh every second must not move the user's selection."""
    keep = None
    if t.row_count and 0 <= t.cursor_row < t.row_count:
        keep = t.coordinate_to_cell_key(t.cursor_coordinate).row_key
    t.clear()
    for key, cells in rows:
        t.add_row(*cells, key=key)
    if keep is not None and keep in t.rows:
        t.move_cursor(row=t.get_row_index(keep), animate=False, scroll=False)


def _gpu_detail(op: dict) -> str:
    """An operation's GPU time and overlap for its details notice ('' without GPU activity)."""
    ov = op.get("overlap_s")
    if op.get("gpu_s") is None or not ov:
        return ""
    whole = sum(ov.values()) or 1.0
    g = op.get("gpu") or {}
    per_step = f", {g['launches_per_step']:,.1f} kernels/step" if g.get("launches_per_step") is not None else ""
    return (f"; GPU {op['gpu_s']:.3f}s launched here{per_step}; of its wall time: CPU+GPU "
            f"{100 * ov['both'] / whole:.0f}%, GPU only {100 * ov['gpu_only'] / whole:.0f}%, "
            f"CPU only {100 * ov['cpu_only'] / whole:.0f}%, idle {100 * ov['idle'] / whole:.0f}%")


def _kind(row: dict) -> str:
    """py for a Python thread; else native, or the category the tick mostly found it in."""
    if row["python_thread"]:
        return "py"
    cat = row.get("category") or "native"
    return "native" if cat == "native" else f"native:{LABELS.get(cat, cat)}"


def _short_cmd(cmd: str, n: int = 40) -> str:
    """A command line's start, its program without the directory (`python -B -c from ...`)."""
    prog, _, rest = (cmd or "").partition(" ")
    text = f"{prog.rsplit('/', 1)[-1]} {rest}".strip()
    return text if len(text) <= n else text[:n - 1] + "…"


def _rate(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _waits(waits: list[dict]) -> str:
    """ " (on PID 12 (env worker) via socket 80%, ...)": what the waiting was, its top three."""
    top = [f"{w['what']} {100 * w['share']:.0f}%" for w in waits[:3]]
    return f" (on {', '.join(top)})" if top else ""


def _fmt_s(v) -> str:
    return fmt(v, ",.2f", "s")


class HelpScreen(ModalScreen):
    """The key help, shown over the app."""

    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "close")]

    def __init__(self, text: str = ""):
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        yield Static(self.text or HELP, id="help")


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question over the app (y / n, Enter / Escape)."""

    BINDINGS = [Binding("y,enter", "answer(True)", "yes"), Binding("n,escape", "answer(False)", "no")]

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield Static(f"{self.question}\n\n[b]y[/b] yes   [b]n[/b] no", id="confirm")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class RlscopeApp(App):
    """Live view of one ring (written by this process's collector or another one)."""

    CSS = """
    #header { height: 2; background: $boost; padding: 0 1; }
    #banner { height: auto; background: $warning 30%; padding: 0 1; display: none; }
    #banner.show { display: block; }
    #gpu { height: auto; max-height: 5; padding: 0 1; color: $text-muted; }
    #job { height: auto; max-height: 2; padding: 0 1; }
    #ops { height: auto; max-height: 10; }
    #cats { height: auto; }
    #threads { height: 1fr; }
    #procs { height: auto; max-height: 7; display: none; }
    #procs.show { display: block; }
    DataTable { scrollbar-size: 1 1; }
    HelpScreen, ConfirmScreen { align: center middle; }
    #help { width: 64; height: auto; border: round $accent; padding: 1 2; background: $surface; }
    #confirm { width: 72; height: auto; border: round $warning; padding: 1 2; background: $surface; }
    """
    BINDINGS = [
        Binding("q", "quit_app", "Quit"),
        Binding("ctrl+c", "quit_app", "Quit", show=False),
        Binding("p", "pause", "Pause"),
        Binding("s", "snapshot", "Snapshot"),
        Binding("o", "sort", "Sort"),
        Binding("r", "reset", "Reset"),
        Binding("f", "scope", "Process"),
        Binding("g", "gpu", "GPU timing"),
        Binding("space", "play", "Play/pause"),
        Binding("left_square_bracket", "seek(-10)", "-10s"),
        Binding("right_square_bracket", "seek(10)", "+10s"),
        Binding("plus", "speed(2)", "Faster", show=False),
        Binding("minus", "speed(0.5)", "Slower", show=False),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(self, ring_path: str, summary_path: str, interval_s: float = 1.0, clock=time.monotonic,
                 write_on_quit: bool = True, request_gpu=None, pid: int | None = None, player=None):
        super().__init__()
        self.player = player                 # replay: status(), toggle(), scale_speed(), seek(), generation, ring_path
        self._clock = clock
        self._generation = getattr(player, "generation", 0)
        self.pid = pid                       # known before the ring says it (attach in progress)
        self.request_gpu = request_gpu       # attach sessions: ask the collector to inject the GPU agent
        self.write_on_quit = write_on_quit   # False when the session writes the final summary itself
        self.vm = ViewModel(ring_path, clock=clock)
        self.summary_path = summary_path
        self.interval_s = interval_s
        self.paused = False
        self.sort = {name: 0 for name in SORTS}
        self.snapshots = 0
        self.last: dict | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(id="header")
            yield Static(id="banner")
            yield DataTable(id="ops", cursor_type="row", zebra_stripes=False)
            yield DataTable(id="procs", cursor_type="row")
            yield DataTable(id="cats", cursor_type="row")
            yield Static(id="job")
            yield Static(id="gpu")
            yield DataTable(id="threads", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self.opened = time.monotonic()
        self.title = "rlscope-top"
        self.query_one("#ops", DataTable).add_columns("operation", "source", "wall", "Python/Sim/Backend/CUDA",
                                                      "trans/s", "calls/s")
        self.query_one("#procs", DataTable).add_columns("pid", "role", "command", "on-CPU", "Python at work", "Sim",
                                                        "Backend", "waiting", "calls", "state")
        self.query_one("#cats", DataTable).add_columns("category", "time", "share", "calls", "history", "source")
        self.query_one("#threads", DataTable).add_columns("tid", "name", "kind", "on-CPU", "off-CPU", "Python",
                                                          "native", "Backend", "Sim", "CUDA")
        self.refresh_view()
        self.set_interval(self.interval_s, self.refresh_view)

    # -- refresh -----------------------------------------------------------
    def notices(self) -> list[str]:
        """The messages of the notifications on screen now (what a user reads)."""
        return [n.message for n in self._notifications]

    def refresh_view(self) -> None:
        """Read the ring and redraw (unless paused; the ring is still read)."""
        try:
            self._refresh()
        except NoMatches:     # a refresh due while the app tears its widgets down (on quit)
            pass

    def _refresh(self) -> None:
        if self.player is not None and self.player.generation != self._generation:   # sought back: a new ring
            self._generation = self.player.generation
            self.vm = ViewModel(self.player.ring_path, clock=self._clock)
        try:
            self.vm.poll()
        except Exception as e:  # a vanished or corrupt ring must not freeze the screen
            self._banner(f"cannot read the ring: {e}")
            return
        if self.paused:
            return
        if self.vm.attaching:                # still attaching: the collector loads (or compiles) the probes
            self._attaching()
            return
        snap = self.last = self.vm.snapshot()
        self._header(snap)
        self._banner_for(snap)
        self._ops(snap)
        self._procs(snap)
        self._cats(snap)
        self._threads(snap)
        self.query_one("#job", Static).update(Text(snap["job"]))
        self.query_one("#gpu", Static).update(Text("\n".join(snap["gpu"]["lines"])))   # rlscope_top/report/gpu_summary.py

    def _attaching(self) -> None:
        notes = self.vm.notes()
        status = next((m for m in reversed(notes) if m.startswith("attaching")), "attaching")
        # replay: where in the recording (the session was still attaching there), not the screen's age
        when = self.player.status() if self.player is not None else f"[{time.monotonic() - self.opened:.0f}s]"
        line1 = Text.assemble(("rlscope-top ", "bold"), f"pid {self.pid or '?'}")
        self.query_one("#header", Static).update(Text.assemble(line1, "\n", f"{status}  {when}"))
        self._banner("\n".join(n for n in notes if not n.startswith("attaching"))[-600:])

    def _header(self, s: dict) -> None:
        modes = ", ".join(f"{c} {m}" for c, m in s["modes"].items()) or "all exact"
        cmd = (s["command"] or "")[:60]
        procs = s.get("processes") or []
        job = f"+{len(procs) - 1} processes  " if len(procs) > 1 else ""
        scope = f"[categories: PID {s['scope']['pid']} {s['scope']['role']}]  " if s.get("scope") else ""
        line1 = Text.assemble(("rlscope-top ", "bold"), f"pid {s['pid']} {job} ", (scope, "bold"), (cmd, "italic"))
        line2 = (f"{self.player.status() + '  ' if self.player is not None else ''}"
                 f"up {s['uptime_s']:.0f}s  probes: {', '.join(s['groups']) or 'none yet'}  modes: {modes}  "
                 f"overhead {s['overhead_pct']:.1f}% (now {s['overhead_now_pct']:.1f}%)"
                 f"{'' if s['calibrated'] else ' (uncalibrated)'}{_priced_up(s.get('priced_up'))}  "
                 f"drops {s['dropped']}{_steal(s.get('steal_pct'))}{'  [paused]' if self.paused else ''}")
        self.query_one("#header", Static).update(Text.assemble(line1, "\n", line2))

    def _banner_for(self, s: dict) -> None:
        msgs = []
        if s["ended"]:
            msgs.append(f"session ended: {s['end_reason']}. Press q to write the summary and quit.")
        if s["dropped"]:
            msgs.append(f"ring overrun: {s['dropped']} records lost (totals stay right; history has gaps)")
        msgs += [w for w in s["warnings"] if "cannot probe" in w or "budget" in w][-2:]
        msgs += [w for w in s["warnings"] if "another rlscope-top (PID" in w][-1:]   # its numbers are off
        msgs += s.get("checks") or []             # a category the probes under-time (session_figures.coverage)
        self._banner("\n".join(msgs))

    def _banner(self, text: str) -> None:
        b = self.query_one("#banner", Static)
        b.update(text)
        b.set_class(bool(text), "show")

    def _ops(self, s: dict) -> None:
        width = max(10, min(40, self.size.width - 60))
        _refill(self.query_one("#ops", DataTable), [
            (op["name"], (op["name"], op["source"], f"{100 * op['wall_share']:.0f}%", stacked_bar(op["shares"], width),
                          _rate(op["transitions_per_s"]), _rate(op["calls_per_s"])))
            for op in self._sorted("ops", s["operations"])])

    def _cats(self, s: dict) -> None:
        rows = []
        for c in self._sorted("cats", s["categories"]):
            colour, glyph = STYLE[c["name"]]
            share = NA_TEXT if c["seconds"] is None else f"{100 * c['share']:5.1f}%"
            rows.append((c["name"], (Text(f"{glyph} {c['label']}", style=colour), _fmt_s(c["seconds"]), share,
                                     c["calls"], Text(spark(c["history"]), style=colour), c["source"])))
        _refill(self.query_one("#cats", DataTable), rows)

    def _procs(self, s: dict) -> None:
        """The job's processes (shown once there is more than the one attached to)."""
        t = self.query_one("#procs", DataTable)
        t.set_class(len(s["processes"]) > 1, "show")
        _refill(t, [(str(p["pid"]), (p["label"], p["role"], _short_cmd(p["command"]), _fmt_s(p["on_cpu_s"]),
                                     _fmt_s(p["python_s"]), _fmt_s(p["simulator_s"]), _fmt_s(p["backend_s"]),
                                     _fmt_s(p["waiting_s"]), f"{p['calls']:,}", "exited" if p["exited"] else "live"))
                    for p in self._sorted("procs", s["processes"])])

    def _threads(self, s: dict) -> None:
        _refill(self.query_one("#threads", DataTable), [
            (str(r["tid"]), (str(r["tid"]), r["name"], _kind(r), _fmt_s(r["on_cpu_s"]),
                             _fmt_s(r["off_cpu_s"]), _fmt_s(r["python_s"]), _fmt_s(r.get("native_s")),
                             _fmt_s(r["backend_s"]), _fmt_s(r["simulator_s"]), _fmt_s(r["cuda_api_s"])))
            for r in self._sorted("threads", s["threads"])])

    def _sorted(self, table: str, rows: list[dict]) -> list[dict]:
        _, key = SORTS[table][self.sort[table]]
        if key is None:
            return rows
        if table == "ops":          # <all> stays on top
            return rows[:1] + sorted(rows[1:], key=lambda r: (r.get(key) or 0), reverse=True)
        return sorted(rows, key=lambda r: (r.get(key) or 0), reverse=key not in ("tid", "pid"))

    # -- keys --------------------------------------------------------------
    def action_quit_app(self) -> None:
        """Leave; in `view` mode write the summary from what the ring holds first."""
        path = self.summary_path
        if self.write_on_quit:
            try:
                self.vm.poll()
            except Exception:  # noqa: BLE001 - a corrupt tail: the summary of what was read
                pass
            path, _ = self.vm.write_summary(path)
        self.exit(path)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.notify("display paused (collection goes on)" if self.paused else "display resumed")
        if self.last is not None:
            self._header(self.last)

    def action_snapshot(self) -> None:
        self.snapshots += 1
        want = self.vm.snapshot_path(self.summary_path, self.snapshots)
        path, failed = self.vm.write_summary(want)
        self.notify(f"snapshot written to {path}" + (f" (could not write {failed})" if failed else ""),
                    severity="warning" if failed else "information")

    def action_sort(self) -> None:
        """Cycle the sort column of the focused table (threads when none has focus)."""
        focused = self.focused.id if isinstance(self.focused, DataTable) else "threads"
        self.sort[focused] = (self.sort[focused] + 1) % len(SORTS[focused])
        self.notify(f"{focused} sorted by {SORTS[focused][self.sort[focused]][0]}")
        if self.last is not None:
            {"ops": self._ops, "cats": self._cats, "threads": self._threads, "procs": self._procs}[focused](self.last)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row: its details as a notice (operations and threads)."""
        if self.last is None:
            return
        key, table = event.row_key.value, event.data_table.id
        if table == "ops":
            op = next((o for o in self.last["operations"] if o["name"] == key), None)
            if op:
                parts = "  ".join(f"{LABELS[c]} {fmt(None if v is None else 100 * v, '.1f', '%')}" for c, v in op["shares"].items())
                src = f" ({op['source']})" if op["source"] else ""
                self.notify(f"{key}{src}: {parts}; {op['calls']:,} calls, {op['transitions']:,} transitions"
                            + _gpu_detail(op), title="operation")
        elif table == "procs":
            p = next((p for p in self.last["processes"] if str(p["pid"]) == key), None)
            if p:
                self.notify(f"PID {key} ({p['role']}) {p['command'][:80]}: " + ", ".join(
                    f"{LABELS[c]} {_fmt_s(p[f'{c}_s'])}" for c in CATEGORIES)
                    + f", waiting {_fmt_s(p['waiting_s'])}{_waits(p['waits_for'])}, {p['calls']:,} calls; "
                    "f shows its categories",
                    title="process")
        elif table == "threads":
            th = next((t for t in self.last["threads"] if str(t["tid"]) == key), None)
            if th:
                self.notify(f"tid {key} {th['name']}: " + ", ".join(
                    f"{LABELS[c]} {_fmt_s(th[f'{c}_s'])}" for c in CATEGORIES),
                    title="thread")

    def action_scope(self) -> None:
        """Categories of the process selected in the processes table, or of the whole job again."""
        t = self.query_one("#procs", DataTable)
        pid = None
        if self.focused is t and t.row_count and 0 <= t.cursor_row < t.row_count:
            pid = int(t.coordinate_to_cell_key(t.cursor_coordinate).row_key.value)
        elif self.vm.scope is None:
            if self.last and len(self.last["processes"]) > 1:
                self.notify("select a process in the processes table first (tab moves focus), then f")
            return
        pid = None if pid == self.vm.scope else pid
        self.vm.set_scope(pid)
        self.notify("categories: the whole job" if pid is None else f"categories: PID {pid} only")
        self.refresh_view()

    def action_reset(self) -> None:
        self.vm.reset()
        self.notify("counters reset")
        self.refresh_view()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(HELP.replace("  ?  this help", REPLAY_KEYS + "\n  ?  this help")
                                    if self.player is not None else HELP))

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """The GPU key exists only where the screen runs beside its collector (not `view`);
        the playback keys only in `replay`."""
        if action == "gpu":
            return self.request_gpu is not None
        if action in ("play", "seek", "speed"):
            return self.player is not None
        return True

    def action_play(self) -> None:
        self.player.toggle()
        self.refresh_view()

    def action_seek(self, seconds: float) -> None:
        self.player.seek(seconds)
        self.refresh_view()

    def action_speed(self, factor: float) -> None:
        self.player.scale_speed(factor)
        self.refresh_view()

    def action_gpu(self) -> None:
        """Offer to inject the GPU agent; the collector does it (and says how it went)."""
        if self.last is not None and self.last["gpu"]["available"]:
            self.notify("GPU kernel timing is already on")
            return
        pid = (self.last or {}).get("pid", "?")

        def answered(yes: bool | None) -> None:
            if yes:
                self.request_gpu()
                self.notify(f"injecting the GPU agent into PID {pid}: see the GPU line")

        self.push_screen(ConfirmScreen(
            f"Inject rlscope-top's GPU agent into PID {pid} with ptrace? The process pauses for a moment while "
            "the agent loads; CUPTI then times its kernels while rlscope-top is attached, and the agent stays "
            "loaded, idle, after you quit."), answered)


__all__ = ["RlscopeApp", "LABELS", "stacked_bar", "spark"]


def _steal(pct: float | None) -> str:
    """The hypervisor's share of the CPUs, where it is large enough to move the figures (as the
    summary's line)."""
    return f"  steal {pct:.1f}%" if pct is not None and pct >= STEAL_SHOWN_PCT else ""


def _priced_up(labels: list | None) -> str:
    """The probes whose measured traps raised their calibrated price (the summary names them)."""
    if not labels:
        return ""
    return f" ({len(labels)} probe{'s' if len(labels) > 1 else ''} priced from traps)"
