package stall

import (
	"math"
	"runtime/metrics"
	"time"
)

// schedLatency reads how long goroutines waited to run since the last
// read, from the Go scheduler's histogram.
type schedLatency struct {
	sample []metrics.Sample
	prev   []uint64
}

const schedMetric = "/sched/latencies:seconds"

func newSchedLatency() *schedLatency {
	s := &schedLatency{sample: []metrics.Sample{{Name: schedMetric}}}
	metrics.Read(s.sample)
	if h := s.histogram(); h != nil {
		s.prev = append([]uint64(nil), h.Counts...)
	}
	return s
}

func (s *schedLatency) histogram() *metrics.Float64Histogram {
	if s.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s.sample[0].Value.Float64Histogram()
}

// wait is the 99th percentile of the time goroutines spent runnable before
// they ran, over the scheduling events since the last call (zero with too
// few of them to say): how long a goroutine that became ready, such as a
// probe's when its answer arrived, typically waited for a CPU.
func (s *schedLatency) wait() time.Duration {
	metrics.Read(s.sample)
	h := s.histogram()
	if h == nil {
		return 0
	}
	if len(s.prev) != len(h.Counts) {
		s.prev = make([]uint64, len(h.Counts))
	}
	p99 := percentile99(s.prev, h.Counts, h.Buckets)
	copy(s.prev, h.Counts)
	return p99
}

// percentile99 is the lower bound of the bucket holding the 99th
// percentile of the events counted between prev and counts (zero with
// fewer than 20 events): a conservative reading of the histogram.
func percentile99(prev, counts []uint64, buckets []float64) time.Duration {
	var total uint64
	for i, c := range counts {
		total += c - prev[i]
	}
	if total < 20 {
		return 0
	}
	want := total - total/100
	var seen uint64
	for i, c := range counts {
		seen += c - prev[i]
		if seen >= want {
			if lo := buckets[i]; !math.IsInf(lo, 0) && lo > 0 {
				return time.Duration(lo * float64(time.Second))
			}
			return 0
		}
	}
	return 0
}
