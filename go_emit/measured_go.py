"""Go port of the measured components: evaluator.measured_kernel.fill_measured and the
interpolation it calls (evaluator.kernels._bracket, lin1, lin2), line by line in the same
float64 operation order, so the parity tests can ask for identical values.

The header slots (kernels.H_*) are filled in from Python, so the flat layout has one source.
Emitted only for programs that read a measured component (go_emit.emit).
"""
from __future__ import annotations

from evaluator import kernels as kt

__all__ = ["measured_go"]

_SOURCE = """\
// kernelMax is Python's max(a, b) as numba computes it: a unless b > a.
func (m *{T}) kernelMax(a, b float64) float64 {
	if b > a {
		return b
	}
	return a
}

// kernelBracket is evaluator.kernels._bracket: knot pair and weight for x clamped to the knots.
func (m *{T}) kernelBracket(f []float64, start, n int, x float64) (int, int, float64) {
	if x <= f[start] {
		return 0, 0, 0.0
	}
	if x >= f[start+n-1] {
		return n - 1, n - 1, 0.0
	}
	lo := 0
	hi := n - 1
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if f[start+mid] <= x {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, hi, (x - f[start+lo]) / (f[start+hi] - f[start+lo])
}

// kernelLin1 is evaluator.kernels.lin1: a 1-D table [n, x.., y..] at off; first value below,
// proportional above the last knot.
func (m *{T}) kernelLin1(f []float64, off int, x float64) float64 {
	n := int(f[off])
	xs := off + 1
	ys := off + 1 + n
	if x <= f[xs] {
		return f[ys]
	}
	if x >= f[xs+n-1] {
		return f[ys+n-1] * x / f[xs+n-1]
	}
	lo, hi, w := m.kernelBracket(f, xs, n, x)
	return f[ys+lo] + w*(f[ys+hi]-f[ys+lo])
}

func (m *{T}) kernelAtRow(f []float64, voff, ny, i0, i1 int, wx float64, j int) float64 {
	return (1.0-wx)*f[voff+i0*ny+j] + wx*f[voff+i1*ny+j]
}

// kernelLin2 is evaluator.kernels.lin2: a 2-D table [nx, ny, x.., y.., v row-major] at off.
func (m *{T}) kernelLin2(f []float64, off int, x, y float64) float64 {
	nx := int(f[off])
	ny := int(f[off+1])
	xs := off + 2
	ys := xs + nx
	voff := ys + ny
	i0, i1, wx := m.kernelBracket(f, xs, nx, x)
	j0, j1, wy := m.kernelBracket(f, ys, ny, y)
	v := (1.0-wy)*m.kernelAtRow(f, voff, ny, i0, i1, wx, j0) + wy*m.kernelAtRow(f, voff, ny, i0, i1, wx, j1)
	ymax := f[ys+ny-1]
	if y > ymax && ny > 1 {
		ylast := f[ys+ny-2]
		slope := (m.kernelAtRow(f, voff, ny, i0, i1, wx, ny-1) - m.kernelAtRow(f, voff, ny, i0, i1, wx, ny-2)) / (ymax - ylast)
		if slope > 0.0 {
			v += (y - ymax) * slope
		}
	}
	xmax := f[xs+nx-1]
	if x > xmax {
		v *= x / xmax
	}
	return v
}

// decodeAttnUs: one layer's decode attention for batch requests of mean context ctx, never
// faster than the KV bytes at HBM bandwidth or the FLOPs at peak.
func (m *{T}) decodeAttnUs(f []float64, batch, ctx float64) float64 {
	t := m.kernelLin2(f, int(f[{OFF_DEC}]), batch, ctx)
	floor := m.kernelMax(batch*ctx*f[{KV_BYTES_TOK}]/f[{BW}], batch*ctx*f[{DEC_FLOP_TOK}]/f[{PEAK}]) * 1e6
	return m.kernelMax(t, floor)
}

// prefillAttnUs: one layer's prefill attention, nChunks causal chunks of chunk tokens.
func (m *{T}) prefillAttnUs(f []float64, nChunks, chunk float64) float64 {
	t := m.kernelLin2(f, int(f[{OFF_PRE}]), nChunks, chunk)
	floor := f[{PRE_FLOP}] * nChunks * chunk * chunk * 0.5 / f[{PEAK}] * 1e6
	return m.kernelMax(t, floor)
}

// fillMeasured is evaluator.measured_kernel.fill_measured: the step's time from vLLM's measured
// kernels (GEMMs, decode and prefill attention, all-reduce, MoE, their sum) in out[0:6].
func (m *{T}) fillMeasured(f []float64, P, D, nPrefill, nDecode, B, K float64, out []float64) {
	L := f[{LAYERS}]
	peak := f[{PEAK}]
	bw := f[{BW}]
	us := 1e6
	T := P + D
	gemm := 0.0
	allreduce := 0.0
	moe := 0.0
	if T > 0.0 {
		g := m.kernelLin1(f, int(f[{OFF_GEMM}]), T)
		g = m.kernelMax(g, m.kernelMax(f[{GEMM_FLOP_TOK}]*T/peak, f[{GEMM_BYTES}]/bw)*us)
		gemm = L * g
		if f[{OFF_AR_GRAPH}] >= 0.0 {
			var a float64
			if T <= f[{GRAPH_MAX}] {
				a = m.kernelLin1(f, int(f[{OFF_AR_GRAPH}]), T)
			} else {
				a = m.kernelLin1(f, int(f[{OFF_AR_EAGER}]), T)
			}
			a = m.kernelMax(a, T*f[{AR_BYTES_TOK}]*f[{AR_RING}]/f[{NVLINK}]*us)
			allreduce = L * f[{AR_PER_LAYER}] * a
		}
		if f[{OFF_MOE}] >= 0.0 {
			e := m.kernelLin1(f, int(f[{OFF_MOE}]), T)
			e = m.kernelMax(e, m.kernelMax(f[{MOE_FLOP_TOK}]*T/peak, f[{MOE_BYTES}]/bw)*us)
			moe = L * e
		}
	}
	rows := nPrefill + D
	if rows > 0.0 {
		lm := m.kernelLin1(f, int(f[{OFF_LM}]), rows)
		gemm += m.kernelMax(lm, m.kernelMax(f[{LM_FLOP_TOK}]*rows/peak, f[{LM_BYTES}]/bw)*us)
	}
	dec := 0.0
	if D > 0.0 {
		dec = L * m.decodeAttnUs(f, D, m.kernelMax(K/D, 1.0))
	}
	pre := 0.0
	if P > 0.0 && nPrefill > 0.0 {
		pre = L * m.prefillAttnUs(f, nPrefill, P/nPrefill)
		share := 1.0
		if B > 0.0 {
			share = (nPrefill + nDecode) / B
			if share > 1.0 {
				share = 1.0
			}
		}
		kv := L * share * K * f[{KV_BYTES_TOK}] / bw * us
		if dec+pre < kv {
			pre = kv - dec
		}
	}
	out[0] = gemm
	out[1] = dec
	out[2] = pre
	out[3] = allreduce
	out[4] = moe
	out[5] = gemm + dec + pre + allreduce + moe
}"""

_SLOTS = {name[2:]: getattr(kt, name) for name in dir(kt) if name.startswith("H_")}


def measured_go(type_name: str) -> str:
    """The Go methods above for receiver type `type_name`, header slots as integer literals."""
    src = _SOURCE.replace("{T}", type_name)
    for name, slot in sorted(_SLOTS.items(), key=lambda kv: -len(kv[0])):
        src = src.replace("{" + name + "}", str(slot))
    if "{" + "OFF" in src or "[{" in src:
        raise ValueError("measured_go: an unfilled header slot")
    return src
