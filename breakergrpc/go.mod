// Module breakergrpc puts tripswitch circuits on grpc-go clients.
module github.com/tripswitch-dev/tripswitch/breakergrpc

go 1.26.0

require (
	github.com/tripswitch-dev/tripswitch/breaker v0.0.0
	github.com/tripswitch-dev/tripswitch/limit v0.0.0
	go.uber.org/goleak v1.3.0
	golang.org/x/net v0.57.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800
	google.golang.org/grpc v1.84.0
	google.golang.org/protobuf v1.36.11
)

require (
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
)

replace (
	github.com/tripswitch-dev/tripswitch/breaker => ../breaker
	github.com/tripswitch-dev/tripswitch/limit => ../limit
)
