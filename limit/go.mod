// Module limit bounds the calls in flight at one call site: a fixed
// bulkhead and an adaptive concurrency limit. Like the breaker core it needs
// nothing beyond the standard library (it shares the core's Clock and
// ConfigError, so it requires that module and nothing else).
module github.com/tripswitch-dev/tripswitch/limit

go 1.26.0

require github.com/tripswitch-dev/tripswitch/breaker v0.0.0

replace github.com/tripswitch-dev/tripswitch/breaker => ../breaker
