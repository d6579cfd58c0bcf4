"""The Scrapy client of the peers comparison (TestPeers in package
fieldtest, run by scripts/peers.sh).

It fetches one URL over and over (dont_filter=True) until the duration has
passed, with Scrapy's settings at their defaults except:

    AUTOTHROTTLE_ENABLED = True   (its other settings at their defaults)
    CONCURRENT_REQUESTS = 16
    ROBOTSTXT_OBEY = False
    CLOSESPIDER_TIMEOUT = the duration (given on the command line)
    TELNETCONSOLE_ENABLED = False (it would listen on a port; it paces nothing)

The retry middleware is on at its defaults (429 and 503 retried twice).
Every answer, a page or a failure after the retries, queues the next
request, so 16 requests wait in the scheduler at all times and AutoThrottle
alone decides the pace.

    scrapy runspider scrapy_peer.py -a url=http://127.0.0.1:8080/ -s CLOSESPIDER_TIMEOUT=180
"""

import scrapy

# The 16 requests of every client of the comparison.
CONCURRENT = 16


class PeerSpider(scrapy.Spider):
    name = "peer"
    custom_settings = {
        "AUTOTHROTTLE_ENABLED": True,
        "CONCURRENT_REQUESTS": CONCURRENT,
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
    }

    def __init__(self, url, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.url = url

    def next_request(self):
        return scrapy.Request(self.url, dont_filter=True, callback=self.parse, errback=self.failed)

    def start_requests(self):
        for _ in range(CONCURRENT):
            yield self.next_request()

    def parse(self, response):
        yield self.next_request()

    def failed(self, failure):
        yield self.next_request()
