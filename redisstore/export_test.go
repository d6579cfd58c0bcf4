package redisstore

import "time"

// SetClockOffset sets the store's estimate of Redis's clock ahead of
// the local one by d, as a skewed estimate would be.
func SetClockOffset(s *Store, d time.Duration) {
	s.offset.Store(d.Microseconds())
	s.clockKnown.Store(true)
}
