package throttle

// robotsStats fills rs with the state of m's robots.txt cache (see
// RobotsStats). It reads every cached origin under the cache's read lock:
// one pass over at most RobotsConfig.MaxOrigins entries.
func (m *ThrottlingManager) robotsStats(rs *RobotsStats) {
	*rs = RobotsStats{}
	c := m.robots
	if c == nil {
		return
	}
	rs.Enabled, rs.Client, rs.Enforce = true, c.cfg.Client != nil, c.cfg.Enforce
	c.mu.RLock()
	defer c.mu.RUnlock()
	rs.Origins = len(c.origins)
	for _, h := range c.hosts {
		if h.delay > 0 {
			rs.Delays++
		}
	}
	for _, e := range c.origins {
		switch {
		case !e.ready && e.robots == nil && e.failures == 0:
			rs.Fetching++ // a first fetch (a refetch keeps what it had)
		case e.failures > 0:
			rs.Failed++
		case e.robots != nil:
			rs.Rules++
		default:
			rs.NoRules++
		}
	}
}
