"""Views of the archive: terminal tables, the one-file HTML report and the local web app.

    tables   frontier_table, render_frontier, show_program   (`evolve frontier`, `evolve show`)
    report   report_html                                      (`evolve report`)
    server   make_server, serve                               (`evolve ui`; page in static/)
    plots    the Plotly figures of the report
    go_view  the UI's Go view (go_emit.emit_record, as `evolve emit-go`)

Viewers read the archive read-only; the one write is the first computation of the baselines
(evolve.baselines_store).
"""
from evolve.views.format import go_cap_status
from evolve.views.report import report_html
from evolve.views.server import make_server, serve
from evolve.views.tables import frontier_table, render_frontier, show_program

__all__ = ["frontier_table", "go_cap_status", "make_server", "render_frontier", "report_html", "serve",
           "show_program"]
