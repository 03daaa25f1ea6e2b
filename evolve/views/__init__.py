"""Views of the archive: terminal tables, the one-file HTML report and the local web app.

    tables   frontier_table, render_frontier, show_program   (`evolve frontier`, `evolve show`)
    report   report_html                                      (`evolve report`)
    server   make_server, serve                               (`evolve ui`; page in static/)
    plots    the Plotly figures of the report
    history  what progress is measured on (the error the search ranks on, the one hypervolume the
             run summary, the report and the UI share)
    go_view  the UI's Go view (go_emit.emit_record, as `evolve emit-go`)

Viewers read the archive read-only; the one write is the first computation of the baselines
(evolve.baselines_store).
"""
import importlib

# Imported on first use (PEP 562), so that `evolve.views.format` or `.tables` alone does not
# load the report's Plotly or the server: `evolve frontier` and `evolve --help` start fast.
_WHERE = {"go_cap_status": "format", "report_html": "report", "make_server": "server", "serve": "server",
          "frontier_table": "tables", "render_frontier": "tables", "show_program": "tables"}


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f"evolve.views.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'evolve.views' has no attribute {name!r}")


__all__ = ["frontier_table", "go_cap_status", "make_server", "render_frontier", "report_html", "serve",
           "show_program"]
