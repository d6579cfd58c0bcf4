// The Crawlee client of the peers comparison (TestPeers in package
// fieldtest, run by scripts/peers.sh).
//
// It fetches one URL over and over until the duration has passed, with an
// HttpCrawler at its defaults (autoscaled concurrency up to 200, the
// session pool, 3 retries) except for one option:
//
//     additionalMimeTypes: ['text/plain']
//
// HAProxy's and httprate's pages are text/plain, which HttpCrawler would
// otherwise fail without a retry after the server had answered 200; the
// option makes every server's page a page. Each request gets its own
// uniqueKey (the queue would drop the same URL again), and every request
// that ends, handled or failed after its retries, queues the next one, so
// the queue holds 200 requests at all times and Crawlee alone decides the
// pace. At the end of the duration the process exits.
//
//     NODE_PATH=<dir>/node_modules node crawlee_peer.cjs http://127.0.0.1:8080/ 180
'use strict';

const { HttpCrawler } = require('crawlee');

// The queue's length: HttpCrawler's default maxConcurrency, so that the
// queue never holds its autoscaling back.
const QUEUED = 200;

async function main() {
    const [url, seconds] = process.argv.slice(2);
    if (!url || !(Number(seconds) > 0)) {
        console.error('usage: node crawlee_peer.cjs URL SECONDS');
        process.exit(2);
    }
    let n = 0;
    let handled = 0;
    let failed = 0;
    const next = () => ({ url, uniqueKey: `${n++}` });
    const crawler = new HttpCrawler({
        additionalMimeTypes: ['text/plain'],
        async requestHandler() {
            handled++;
            await crawler.addRequests([next()]);
        },
        async failedRequestHandler() {
            failed++;
            await crawler.addRequests([next()]);
        },
    });
    setTimeout(() => {
        console.log(`crawlee: ${handled} requests handled, ${failed} failed after their retries`);
        process.exit(0);
    }, Number(seconds) * 1000);
    await crawler.run(Array.from({ length: QUEUED }, next));
}

main().catch((err) => {
    console.error(err);
    process.exit(1);
});
