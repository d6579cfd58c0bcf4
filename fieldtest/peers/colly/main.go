// Command colly is the colly client of the peers comparison (TestPeers in
// package fieldtest, run by scripts/peers.sh): it fetches one URL over and
// over for a given duration with a colly collector at its defaults plus
//
//	colly.Async(true), colly.AllowURLRevisit()
//	c.Limit(&colly.LimitRule{DomainGlob: "*", Parallelism: 16}) // no Delay
//
// AllowURLRevisit is what lets colly fetch the same URL again. Each answer,
// a success or an error (colly's OnError gets every status from 203 on),
// starts the next request, so 16 are in flight at all times until the
// duration has passed; then it waits for those in flight and exits.
//
//	go run ./peers/colly -url http://127.0.0.1:8080/ -duration 3m
package main

import (
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/gocolly/colly/v2"
)

// parallelism is colly's LimitRule.Parallelism: the 16 requests in flight
// of every client of the comparison.
const parallelism = 16

func main() {
	url := flag.String("url", "", "the URL to fetch over and over")
	duration := flag.Duration("duration", time.Minute, "how long to crawl")
	flag.Parse()
	if *url == "" || *duration <= 0 {
		fmt.Fprintln(os.Stderr, "usage: colly -url URL -duration D")
		os.Exit(2)
	}
	if err := crawl(*url, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "colly:", err)
		os.Exit(1)
	}
}

// crawl runs the collector until d has passed and prints its counts.
func crawl(url string, d time.Duration) error {
	c := colly.NewCollector(colly.Async(true), colly.AllowURLRevisit())
	if err := c.Limit(&colly.LimitRule{DomainGlob: "*", Parallelism: parallelism}); err != nil {
		return err
	}
	deadline := time.Now().Add(d)
	var ok, failed atomic.Int64 // the callbacks run on many goroutines
	next := func() {
		if time.Now().Before(deadline) {
			// Visit in async mode only fails on a bad URL, which the
			// first Visit reports.
			_ = c.Visit(url)
		}
	}
	c.OnResponse(func(*colly.Response) { ok.Add(1); next() })
	c.OnError(func(*colly.Response, error) { failed.Add(1); next() })
	for range parallelism {
		if err := c.Visit(url); err != nil {
			return err
		}
	}
	c.Wait()
	fmt.Printf("colly: %d answers handled by OnResponse, %d by OnError\n", ok.Load(), failed.Load())
	return nil
}
