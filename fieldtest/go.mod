module github.com/crawlerkit/throttle/fieldtest

go 1.26.0

replace github.com/crawlerkit/throttle => ../

require (
	github.com/crawlerkit/throttle v0.1.0
	github.com/crawlerkit/throttle/redisstore v0.1.0
	github.com/go-chi/httprate v0.16.1
	github.com/redis/go-redis/v9 v9.23.0
	github.com/stretchr/testify v1.12.1
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/klauspost/cpuid/v2 v2.4.0 // indirect
	github.com/zeebo/xxh3 v1.1.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)

replace github.com/crawlerkit/throttle/redisstore => ../redisstore
