// Minimal stand-in for BLIS's sim package (github.com/inference-sim/inference-sim/sim),
// used only to compile-check emitted latency models. It declares the Request fields the
// emitted code reads, with BLIS's own types: InputTokens and OutputTokens are []TokenID
// (an int32 type in BLIS), ProgressIndex int64, NumNewTokens int.
package sim

// TokenID is BLIS's token identifier type (sim/internal/tokenid: type TokenID int32).
type TokenID int32

// Request is the subset of BLIS's sim.Request that latency models read.
type Request struct {
	ID            string
	InputTokens   []TokenID
	OutputTokens  []TokenID
	ProgressIndex int64
	NumNewTokens  int
}
