// Minimal stand-in for BLIS's sim package (github.com/inference-sim/inference-sim/sim),
// used only to compile-check emitted latency models. It declares just the Request fields
// the emitted code reads. In BLIS itself InputTokens and OutputTokens are []TokenID
// (an int32 type); the emitted code uses only their lengths, so it compiles against both.
package sim

// Request is the subset of BLIS's sim.Request that latency models read.
type Request struct {
	ID            string
	InputTokens   []int
	OutputTokens  []int
	ProgressIndex int64
	NumNewTokens  int
}
