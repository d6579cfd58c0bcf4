module github.com/crawlerkit/throttle/examples/fleet

go 1.26.0

replace (
	github.com/crawlerkit/throttle => ../..
	github.com/crawlerkit/throttle/redisstore => ../../redisstore
)

require (
	github.com/crawlerkit/throttle v0.1.0
	github.com/crawlerkit/throttle/redisstore v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
