package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/localnet"
)

// TestCreditsPerWindow runs the example in fake time (a synctest bubble,
// the API served in process), so the server's windows and the throttle's
// line up exactly however loaded the machine is.
func TestCreditsPerWindow(t *testing.T) {
	opt := defaultOptions()
	var out strings.Builder
	res := localnet.Run(t, func(ctx context.Context) (result, error) { return runWith(ctx, &out, opt) })
	t.Log("\n" + out.String())

	for _, a := range res.Accounts {
		ws := res.Windows[a.Key]
		total := 0
		for k, w := range ws {
			total += w.Requests
			// The quota holds in every window, for both accounts.
			if w.Credits > quota {
				t.Errorf("%s, window %d: charged %d credits, quota is %d", a.Name, k+1, w.Credits, quota)
			}
		}
		if total != a.Requests {
			t.Errorf("%s: server saw %d requests, want %d", a.Name, total, a.Requests)
		}
		if len(ws) == 0 {
			t.Fatalf("%s: no requests", a.Name)
		}
		first := ws[0]
		if !a.Correct {
			// Estimates alone: exactly quota/estimate requests per window.
			if first.Requests != quota/estimateCost {
				t.Errorf("%s, window 1: %d requests, want %d", a.Name, first.Requests, quota/estimateCost)
			}
			continue
		}
		// Corrections let more requests in than the estimates alone would,
		// until the actual spending is within one estimate of the quota.
		if first.Requests <= quota/estimateCost {
			t.Errorf("%s, window 1: %d requests, want more than the %d the estimates allow", a.Name, first.Requests, quota/estimateCost)
		}
		if first.Credits <= quota-estimateCost {
			t.Errorf("%s, window 1: charged %d credits, want > %d (requests were waiting)", a.Name, first.Credits, quota-estimateCost)
		}
	}
}

func TestActualCostFeedback(t *testing.T) {
	resp := &http.Response{StatusCode: 200, Header: http.Header{"X-Actual-Cost": {"2"}}}
	fb := actualCostFeedback(time.Now(), resp, nil)
	want := []throttle.QuotaUse{{Scope: "credits", Cost: 2, HasCost: true}}
	if !slices.Equal(fb.Quota, want) {
		t.Errorf("X-Actual-Cost 2: Quota %+v, want %+v", fb.Quota, want)
	}
	resp.Header.Del("X-Actual-Cost")
	if fb := actualCostFeedback(time.Now(), resp, nil); fb.Quota != nil {
		t.Errorf("no X-Actual-Cost: Quota %+v, want nil (keep the estimate)", fb.Quota)
	}
}
