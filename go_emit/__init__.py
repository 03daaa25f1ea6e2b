"""Go emission: any validated program becomes a BLIS LatencyModel.

    emit_record(record, gt, *, package="latency", interface="blis", caps=Caps(),
                simplify=True, probes=None) -> EmittedGo(code, models, removed, note, program)

is the one entry point for an archived program (CLI `evolve emit-go`, the UI's Go view, the
report); `emit_go` is the lower level (a Program plus per-model values). See go_emit.record.
"""
from .emit import GoEmitError, emit_go
from .record import EmittedGo, emit_record

__all__ = ["EmittedGo", "GoEmitError", "emit_go", "emit_record"]
