package throttle

// Issue 16 item 2: what a new user of robots.txt handling met. robots.txt
// fetches counted as pages in Stats and the hooks, with no way to tell
// them apart.

import (
	"net/http"
	"net/url"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hookLog records the Admitted, Released and Backoff events of a manager.
type hookLog struct {
	mu       sync.Mutex
	admitted []AdmittedEvent
	released []ReleasedEvent
	backoff  []BackoffEvent
}

func (l *hookLog) hooks() Hooks {
	return Hooks{
		Admitted: func(e AdmittedEvent) { l.mu.Lock(); l.admitted = append(l.admitted, e); l.mu.Unlock() },
		Released: func(e ReleasedEvent) { l.mu.Lock(); l.released = append(l.released, e); l.mu.Unlock() },
		Backoff:  func(e BackoffEvent) { l.mu.Lock(); l.backoff = append(l.backoff, e); l.mu.Unlock() },
	}
}

// urlOf is u as a string, "" for nil.
func urlOf(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.String()
}

// TestRobotsCountedApart: the user's crawl. An origin whose robots.txt is
// a 404 and two pages: Stats shows 2 page requests answered 2xx and 1
// robots.txt fetch, no 4xx, in the scope and in the totals, also once the
// scope is forgotten; the hooks see the fetch marked, with its URL, so a
// metric of pages can skip it.
func TestRobotsCountedApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{robotsStatus: 404}
		var log hookLog
		m := robotsManager(t, func(c *Config) { c.Hooks = log.hooks() })
		client := &http.Client{Transport: m.Transport(site)}
		fetchPage(t, client, "http://shop.example/a", "")
		fetchPage(t, client, "http://shop.example/b?q=1", "")

		want := Counts{Requests: 2, Responses: [6]uint64{2: 2}, Robots: 1}
		st := m.Stats()
		assert.Equal(t, want, st.Totals)
		require.Len(t, st.Scopes, 1)
		assert.Equal(t, "shop.example", st.Scopes[0].Key)
		assert.Equal(t, want, st.Scopes[0].Counts)

		log.mu.Lock()
		type ev struct {
			URL    string
			Robots bool
			Status int
		}
		var released []ev
		for _, e := range log.released {
			released = append(released, ev{urlOf(e.URL), e.Robots, e.Status})
		}
		var admitted []ev
		for _, e := range log.admitted {
			admitted = append(admitted, ev{urlOf(e.URL), e.Robots, 0})
		}
		log.mu.Unlock()
		assert.Equal(t, []ev{
			{"http://shop.example/robots.txt", true, 404},
			{"http://shop.example/a", false, 200},
			{"http://shop.example/b?q=1", false, 200},
		}, released)
		assert.Equal(t, []ev{
			{"http://shop.example/robots.txt", true, 0},
			{"http://shop.example/a", false, 0},
			{"http://shop.example/b?q=1", false, 0},
		}, admitted)

		// Forgotten for idleness, the scope's counts stay in the totals,
		// the robots.txt fetch apart.
		time.Sleep(2 * time.Hour)
		for i := range m.shards {
			sh := &m.shards[i]
			sh.mu.Lock()
			m.sweep(sh, time.Now())
			sh.mu.Unlock()
		}
		st = m.Stats()
		assert.Empty(t, st.Scopes, "shop.example forgotten")
		assert.Equal(t, want, st.Totals)
	})
}

// TestRobotsSignalCountedApart: a 503 on robots.txt backs the host off (the
// policy learns from it, the Backoff hook says so, marked), but it is no
// signal of the pages in Stats.
func TestRobotsSignalCountedApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{robotsStatus: 503}
		var log hookLog
		m := robotsManager(t, func(c *Config) { c.Hooks = log.hooks() })
		fetchPage(t, &http.Client{Transport: m.Transport(site)}, "http://shop.example/a", "")
		a := scopeStat(m.Stats(), "shop.example")
		require.NotNil(t, a)
		assert.Equal(t, Counts{Requests: 1, Responses: [6]uint64{2: 1}, Robots: 1}, a.Counts)
		assert.Positive(t, a.BackoffDelay, "the scope learned from the 503 on robots.txt")
		log.mu.Lock()
		defer log.mu.Unlock()
		require.Len(t, log.backoff, 1)
		assert.True(t, log.backoff[0].Robots)
		assert.Equal(t, 503, log.backoff[0].Status)
	})
}
