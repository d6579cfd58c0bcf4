module github.com/crawlerkit/throttle/fieldtest

go 1.26.0

replace github.com/crawlerkit/throttle => ../

require (
	github.com/crawlerkit/throttle v0.0.0-00010101000000-000000000000
	github.com/go-chi/httprate v0.16.1
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/zeebo/xxh3 v1.0.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
