// Module examples holds runnable examples of the tripswitch library; it is
// not imported by anything.
module github.com/tripswitch-dev/tripswitch/examples

go 1.26.0

require (
	github.com/tripswitch-dev/tripswitch/accessgate v0.0.0
	github.com/tripswitch-dev/tripswitch/breaker v0.0.0
	github.com/tripswitch-dev/tripswitch/breakerhttp v0.0.0
	github.com/tsenart/vegeta/v12 v12.13.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/maypok86/otter/v2 v2.4.0 // indirect
	github.com/rs/dnscache v0.0.0-20230804202142-fc85eb664529 // indirect
	github.com/tripswitch-dev/tripswitch/limit v0.0.0 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace (
	github.com/tripswitch-dev/tripswitch/accessgate => ../accessgate
	github.com/tripswitch-dev/tripswitch/breaker => ../breaker
	github.com/tripswitch-dev/tripswitch/breakerhttp => ../breakerhttp
	github.com/tripswitch-dev/tripswitch/limit => ../limit
)
