package throttle

import (
	"math"
	"strconv"
	"time"
)

// Pace is a scope's effective pace at one instant: what all the rules that
// limit its starts allow together, and the one rule that binds.
//
// Every rule limits the same thing, when the scope's next request may
// start, and they combine in one place, the default ScopeManager:
//
//   - The delay between starts is the largest of the configured Delay (or,
//     with rampup on, rampup's rate, which replaces it), the robots.txt
//     Crawl-delay, AutoThrottle's delay and backoff's delay; each start
//     draws its jitter factor once (Backoff.Jitter while backoff's delay is
//     the largest), so the mean rate is 1/(delay x mean factor).
//   - The concurrency is the configured one (or, with rampup on, the slots
//     its rate needs), 1 under a robots.txt delay, and lower while backoff
//     reduces it after timeouts. At a latency L, c slots carry at most c/L
//     starts a second; with SlotDelay S, at most c/S.
//   - A Quota of Q per Window W allows Q/W in the long run.
//   - A server-given wait (Retry-After, RateLimit headers) holds every
//     start until it passes: the rate is 0 until then.
//   - Config.GlobalConcurrency caps the permits of all scopes together; it
//     binds when they are all held.
//
// Rate is the smallest of these rates and Binding the rule that gives it.
// Stats reports a Pace for every scope, and the status page shows it: when
// a setting seems to do nothing, Binding names the rule that wins.
//
// The zero Pace, Rate 0 with Binding ReasonNone, means no pace is known:
// Stats gives it for a scope with a custom ScopeManager. A plain value:
// copy it freely, but don't change it while another goroutine reads it.
type Pace struct {
	// Rate is the mean number of starts per second the rules allow in
	// the long run; +Inf when none bounds it (Delay 0, no latency seen).
	Rate float64
	// Delay is the least time between two starts before jitter: the
	// largest delay of any rule.
	Delay time.Duration
	// Concurrency is how many requests may be in flight at once.
	Concurrency int
	// Binding is the rule that sets Rate now: ReasonDelay, ReasonRampup,
	// ReasonAutoThrottle, ReasonRobots, ReasonBackoff, ReasonSlotDelay,
	// ReasonConcurrency (the slots at the latency seen), ReasonQuota,
	// ReasonGate or ReasonGlobal.
	Binding Reason
}

// pace computes the scope's Pace at now; lat is the latency last seen
// (0: none yet).
func (s *defaultScope) pace(now time.Time, lat time.Duration) Pace {
	d, why := s.delay()
	c := s.concurrency()
	p := Pace{Rate: math.Inf(1), Delay: d, Concurrency: c, Binding: why}
	if d > 0 {
		j := s.cfg.Jitter
		if why == ReasonBackoff {
			j = s.cfg.Backoff.Jitter
		} else if s.cfg.Rampup.Enabled {
			j = rampupJitter(j)
		}
		p.Rate = 1 / (d.Seconds() * (1 + (j.Min+j.Max)/2))
	}
	lower := func(rate float64, r Reason) {
		if rate < p.Rate {
			p.Rate, p.Binding = rate, r
		}
	}
	if sd := s.cfg.SlotDelay; sd > 0 {
		lower(float64(c)/sd.Seconds(), ReasonSlotDelay)
	}
	if lat > 0 {
		lower(float64(c)/lat.Seconds(), ReasonConcurrency)
	}
	if s.cfg.Quota > 0 {
		lower(float64(s.cfg.Quota)/s.cfg.Window.Seconds(), ReasonQuota)
	}
	if now.Before(s.adm.Gate) {
		p.Rate, p.Binding = 0, ReasonGate
	}
	return p
}

// ineffectiveSettings returns, for a scope's configuration, the settings
// that cannot take effect because another rule always binds first: one
// sentence each, naming the field. New logs each once (see
// ThrottlingManager.warnStatic).
func ineffectiveSettings(name string, sc *ScopeConfig) []string {
	var out []string
	if sc.Delay > 0 && sc.SlotDelay > 0 && !sc.Rampup.Enabled {
		slotEvery := sc.SlotDelay / time.Duration(sc.Concurrency)
		if sc.Delay < slotEvery {
			out = append(out, name+".Delay "+sc.Delay.String()+" has no effect: "+name+".SlotDelay "+
				sc.SlotDelay.String()+" with Concurrency "+strconv.Itoa(sc.Concurrency)+" allows one start per "+
				slotEvery.String()+"; lower SlotDelay (0 turns it off) or raise Concurrency")
		}
	}
	return out
}
