package v1alpha1

import "fmt"

// The bounds of halfOpen.samplePercent: the CRD's markers say the same (a
// test holds them to these), Resolve keeps a stored value within them, and
// the trial's expression is built for them alone.
const (
	MinHalfOpenSamplePercent = 1
	MaxHalfOpenSamplePercent = 100
)

// SampleSteps is the share of requests a half-open trial of percent lets
// through, in 256ths: rounded up, as halfOpen.samplePercent says (6 is
// 16/256), since the trial samples on the first hex digits of a random
// UUID.
func SampleSteps(percent int32) int { return (int(percent)*256 + 99) / 100 }

// SampleShare is that share as records, statuses and messages show it:
// "6.25%" for 6.
func SampleShare(percent int32) string {
	return fmt.Sprintf("%.4g%%", float64(SampleSteps(percent))*100/256)
}
