// Copied into the compile-check module as sim/latency_model.go for interface "legacy5".
package sim

// LatencyModel is the older five-method form of BLIS's latency interface (microseconds).
type LatencyModel interface {
	StepTime(batch []*Request) int64
	QueueingTime(req *Request) int64
	OutputTokenProcessingTime() int64
	SchedulingProcessingTime() int64
	PreemptionProcessingTime() int64
}
