// Copied into the compile-check module as sim/latency_model.go for interface "blis".
package sim

// LatencyModel is BLIS's current four-method latency interface (all times in microseconds).
type LatencyModel interface {
	StepTime(batch []*Request) int64
	QueueingTime(req *Request) int64
	OutputTokenProcessingTime() int64
	PostDecodeFixedOverhead() int64
}
