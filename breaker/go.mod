// Module breaker is tripswitch's circuit breaker core. It depends on nothing
// but the standard library, so a service can adopt it without pulling in the
// controller's Kubernetes dependencies (the repository root is another module).
module github.com/tripswitch-dev/tripswitch/breaker

go 1.26.0
