package breaker

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseWait reads a wait a server asks for as a whole number of units:
// HTTP's Retry-After delay-seconds (unit time.Second) or gRPC's
// grpc-retry-pushback-ms (time.Millisecond). Only decimal digits are a
// wait (a sign, a space or a fraction is not); a wait too long for a
// time.Duration, even past an int64, saturates to the longest one rather
// than being dropped, so that OpenFor's cap (Config.OpenUntilCap) applies
// to it as to any long wait.
func ParseWait(v string, unit time.Duration) (time.Duration, bool) {
	if v == "" || unit <= 0 || strings.TrimLeft(v, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > uint64(math.MaxInt64/unit) {
		return math.MaxInt64, true // only digits, so err is a range error
	}
	return time.Duration(n) * unit, true
}
