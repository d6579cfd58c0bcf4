package robots

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// check is one Allowed expectation.
type check struct {
	agent, path string
	want        bool
}

func runChecks(t *testing.T, r *Robots, checks []check) {
	t.Helper()
	for _, c := range checks {
		assert.Equal(t, c.want, r.Allowed(c.agent, c.path), "Allowed(%q, %q)", c.agent, c.path)
	}
}

func TestProductToken(t *testing.T) {
	for in, want := range map[string]string{
		"":                                "",
		"MyBot":                           "MyBot",
		"MyBot/2.1 (+https://x)":          "MyBot",
		"MyBot (+https://x)":              "MyBot",
		"MyBot\t1.0":                      "MyBot",
		"  MyBot/1":                       "MyBot",
		"/1.0":                            "",
		"*":                               "*",
		"Mozilla/5.0 (compatible; X/1.0)": "Mozilla",
	} {
		assert.Equal(t, want, ProductToken(in), "ProductToken(%q)", in)
	}
}

// RFC 9309, section 5.1.
const rfcSimpleExample = `User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot

EOF
`

func TestRFC9309SimpleExample(t *testing.T) {
	r := ParseBytes([]byte(rfcSimpleExample))
	runChecks(t, r, []check{
		// "*" group.
		{"otherbot", "/", true},
		{"otherbot", "/a.gif", false},
		{"otherbot", "/a.gif?x", true},
		{"otherbot", "/example/", false},
		{"otherbot", "/example/page.html", false},
		{"otherbot", "/publications/", true},
		{"otherbot", "/publications/a.gif", true}, // longer Allow wins
		// foobot.
		{"foobot", "/", false},
		{"foobot", "/anything", false},
		{"foobot", "/example/page.html", true},
		{"foobot", "/example/allowed.gif", true},
		{"foobot", "/example/other.gif", false},
		{"FooBot/1.0", "/example/page.html", true},
		// barbot and bazbot share a group.
		{"barbot", "/example/page.html", false},
		{"bazbot", "/example/page.html", false},
		{"barbot", "/example/other", true},
		{"bazbot", "/a.gif", true},
		// quxbot has an empty group: everything allowed, "*" not consulted.
		{"quxbot", "/example/", true},
		{"quxbot", "/a.gif", true},
	})
}

// RFC 9309, section 2.1 and 2.2.1.
func TestRFC9309Groups(t *testing.T) {
	r := ParseBytes([]byte(`user-agent: a
disallow: /c

user-agent: b
disallow: /d

user-agent: e
user-agent: f
disallow: /g

user-agent: h
`))
	runChecks(t, r, []check{
		{"a", "/c", false}, {"a", "/d", true},
		{"b", "/d", false}, {"b", "/c", true},
		{"e", "/g", false}, {"f", "/g", false}, {"e", "/c", true},
		{"h", "/c", true}, {"h", "/g", true},
		{"z", "/c", true},
	})

	// Groups for the same agent are merged.
	r = ParseBytes([]byte(`user-agent: ExampleBot
disallow: /foo
disallow: /bar

user-agent: *
disallow: /star

user-agent: examplebot
disallow: /baz
`))
	runChecks(t, r, []check{
		{"ExampleBot", "/foo", false}, {"ExampleBot", "/bar", false}, {"ExampleBot", "/baz", false},
		{"ExampleBot", "/star", true}, {"ExampleBot", "/other", true},
		{"other", "/star", false}, {"other", "/foo", true},
	})
}

func TestSpecialCharacters(t *testing.T) {
	tests := []struct {
		pattern, path string
		match         bool
	}{
		{"/path", "/path", true},
		{"/path", "/path/", true},
		{"/path", "/path.html", true},
		{"/path", "/pathology", true},
		{"/path", "/path?x=1", true},
		{"/path", "/PATH", false},
		{"/path", "/a/path", false},
		{"/path", "/pat", false},
		{"/path$", "/path", true},
		{"/path$", "/path/", false},
		{"/path$", "/path?x", false},
		{"/path$", "/pathology", false},
		{"/path*", "/path", true},
		{"/path*", "/path/", true},
		{"/path*", "/pathology", true},
		{"/path*", "/pat", false},
		{"/*.php$", "/index.php", true},
		{"/*.php$", "/a/b/c.php", true},
		{"/*.php$", "/index.php?x", false},
		{"/*.php$", "/a.php5", false},
		{"/*.php", "/a.php5", true},
		{"/fish*.php", "/fish.php", true},
		{"/fish*.php", "/fishheads/catfish.php?parameters", true},
		{"/fish*.php", "/Fish.PHP", false},
		{"*", "/anything", true},
		{"*.gif$", "/x/y.gif", true},
		{"*.gif$", "/x/y.gift", false},
		{"/a*b*c", "/aXbYc", true},
		{"/a*b*c", "/aXcYb", false},
		{"/a*b*c$", "/abcabc", true},
		{"/a*b*c$", "/abcab", false},
		{"/a**b", "/aXXb", true},
		{"/a*$", "/a", true},
		{"/a*bc$", "/abcbc", true},
		{"/a$b", "/a$b", true}, // '$' not at the end is literal
		{"/a$b", "/a", false},
		{"/", "/", true},
		{"/$", "/", true},
		{"/$", "/a", false},
		{"foo", "/foo", true}, // a missing leading '/' is added
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.path, func(t *testing.T) {
			r := ParseBytes([]byte("User-agent: *\nDisallow: " + tt.pattern + "\n"))
			assert.Equal(t, !tt.match, r.Allowed("bot", tt.path))
		})
	}
}

func TestPercentEncoding(t *testing.T) {
	tests := []struct {
		pattern, path string
		match         bool
	}{
		{"/foo/bar?baz=quz", "/foo/bar?baz=quz", true},
		{"/foo/bar?baz=https%3A%2F%2Ffoo.bar", "/foo/bar?baz=https%3A%2F%2Ffoo.bar", true},
		{"/foo/bar?baz=https%3A%2F%2Ffoo.bar", "/foo/bar?baz=https%3a%2f%2ffoo.bar", true},
		{"/foo/bar?baz=https://foo.bar", "/foo/bar?baz=https://foo.bar", true},
		{"/foo/bar/ツ", "/foo/bar/%E3%83%84", true},
		{"/foo/bar/ツ", "/foo/bar/%e3%83%84", true},
		{"/foo/bar/%E3%83%84", "/foo/bar/ツ", true},
		{"/foo/bar/%E3%83%84", "/foo/bar/%E3%83%84", true},
		{"/foo/bar/%e3%83%84", "/foo/bar/%E3%83%84", true},
		{"/foo/bar/%62%61%7A", "/foo/bar/baz", true},
		{"/foo/bar/baz", "/foo/bar/%62%61%7a", true},
		{"/%7Efoo", "/~foo", true},
		{"/%7efoo", "/~foo", true},
		{"/~foo", "/%7Efoo", true},
		{"/~foo", "/%7efoo", true},
		{"/a%2Fb", "/a/b", false}, // reserved characters stay encoded
		{"/a/b", "/a%2Fb", false},
		{"/a%2fb", "/a%2Fb", true},
		{"/a b", "/a%20b", true},
		{"/a%", "/a%25", true},
		{"/a%zz", "/a%25zz", true},
		{"/ツ*$", "/%E3%83%84/x", true},
		{"/%2A", "/x", false}, // an encoded '*' is not a wildcard
		{"/%2A", "/%2a", true},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.path, func(t *testing.T) {
			r := ParseBytes([]byte("User-agent: *\nDisallow: " + tt.pattern + "\n"))
			assert.Equal(t, !tt.match, r.Allowed("bot", tt.path))
		})
	}
}

func TestLongestMatch(t *testing.T) {
	tests := []struct {
		name, robots string
		checks       []check
	}{
		{"longer allow", "Allow: /p\nDisallow: /", []check{
			{"", "/page", true}, {"", "/other", false}, {"", "/", false},
		}},
		{"order independent", "Disallow: /\nAllow: /p", []check{
			{"", "/page", true}, {"", "/other", false},
		}},
		{"longer disallow", "Allow: /folder/\nDisallow: /folder/private", []check{
			{"", "/folder/x", true}, {"", "/folder/private/x", false},
		}},
		{"tie allow wins", "Disallow: /folder\nAllow: /folder", []check{
			{"", "/folder/page", true},
		}},
		{"tie with wildcards", "Disallow: /*.htm\nAllow: /page*", []check{
			{"", "/page.html", true}, {"", "/x.html", false},
		}},
		{"wildcard longer", "Allow: /page\nDisallow: /*.htm", []check{
			{"", "/page.htm", false}, {"", "/page", true},
		}},
		{"anchored root", "Allow: /$\nDisallow: /", []check{
			{"", "/", true}, {"", "/page.htm", false},
		}},
		{"robots.txt always allowed", "Disallow: /", []check{
			{"", "/robots.txt", true}, {"", "/robots.txt?x=1", true}, {"", "/robots.txt.bak", false},
		}},
		{"empty disallow matches nothing", "Disallow:\nDisallow: /x", []check{
			{"", "/", true}, {"", "/y", true}, {"", "/x", false},
		}},
		{"empty allow matches nothing", "Allow:\nDisallow: /", []check{
			{"", "/", false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ParseBytes([]byte("User-agent: *\n" + tt.robots + "\n"))
			runChecks(t, r, tt.checks)
		})
	}

	// Tie across merged groups.
	r := ParseBytes([]byte("User-agent: bot\nDisallow: /a\n\nUser-agent: x\nAllow: /b\nUser-agent: bot\nAllow: /a\n"))
	assert.True(t, r.Allowed("bot", "/a"))
}

func TestAgentMatching(t *testing.T) {
	r := ParseBytes([]byte(`User-agent: MyBot
Disallow: /private

User-agent: FooBot/1.0
Disallow: /foo

User-agent: *
Disallow: /star
`))
	runChecks(t, r, []check{
		{"MyBot/2.1 (+https://x)", "/private", false},
		{"MyBot/2.1 (+https://x)", "/star", true},
		{"mybot", "/private", false},
		{"MYBOT", "/private", false},
		{"MyBot", "/private", false},
		{" MyBot", "/private", false},
		{"MyBotX", "/private", true},
		{"MyBotX", "/star", false},
		{"foobot", "/foo", false},
		{"FOOBOT/9", "/foo", false},
		{"Mozilla/5.0 (compatible; MyBot/2.1)", "/private", true},
		{"Mozilla/5.0 (compatible; MyBot/2.1)", "/star", false},
		{"", "/star", false},
		{"", "/private", true},
		{"*", "/star", false},
	})
}

func TestGroupedAgents(t *testing.T) {
	r := ParseBytes([]byte(`User-agent: a
# comment between agent lines
User-agent: b

Sitemap: https://example.com/sitemap.xml
User-agent: c
Disallow: /x

Disallow: /y
Crawl-delay: 3
User-agent: d
Disallow: /z
`))
	for _, a := range []string{"a", "b", "c"} {
		runChecks(t, r, []check{{a, "/x", false}, {a, "/y", false}, {a, "/z", true}})
		d, ok := r.CrawlDelay(a)
		assert.True(t, ok)
		assert.Equal(t, 3*time.Second, d)
	}
	runChecks(t, r, []check{{"d", "/x", true}, {"d", "/z", false}})
	_, ok := r.CrawlDelay("d")
	assert.False(t, ok)
}

func TestFallbacks(t *testing.T) {
	r := ParseBytes([]byte("User-agent: a\nDisallow: /\n"))
	runChecks(t, r, []check{
		{"a", "/x", false},
		{"b", "/x", true}, // no matching group and no "*" group
		{"", "/x", true},
	})

	for _, r := range []*Robots{nil, {}, ParseBytes(nil), ParseBytes([]byte("\n\n# only comments\n"))} {
		assert.True(t, r.Allowed("bot", "/"))
		assert.True(t, r.Allowed("", "/x"))
		_, ok := r.CrawlDelay("bot")
		assert.False(t, ok)
		_, ok = r.RequestRate("bot")
		assert.False(t, ok)
		_, ok = r.Delay("bot")
		assert.False(t, ok)
	}
}

func TestSyntax(t *testing.T) {
	tests := []struct {
		name, robots string
		checks       []check
	}{
		{"BOM", "\xEF\xBB\xBFUser-agent: *\nDisallow: /x\n", []check{{"", "/x", false}}},
		{"CRLF", "User-agent: a\r\nDisallow: /x\r\n\r\nUser-agent: *\r\nDisallow: /y\r\n", []check{
			{"a", "/x", false}, {"a", "/y", true}, {"b", "/y", false}, {"b", "/x", true},
		}},
		{"CR only", "User-agent: a\rDisallow: /x\r\rUser-agent: *\rDisallow: /y\r", []check{
			{"a", "/x", false}, {"a", "/y", true}, {"b", "/y", false},
		}},
		{"no final newline", "User-agent: *\nDisallow: /x", []check{{"", "/x", false}}},
		{"comments", "# header\nUser-agent: * # all\nDisallow: /x # no x\n#Disallow: /y\nDisallow: /z#w\n", []check{
			{"", "/x", false}, {"", "/x%20", false}, {"", "/y", true}, {"", "/z", false}, {"", "/zw", false},
		}},
		{"rules before user-agent", "Disallow: /x\nAllow: /y\nUser-agent: *\nDisallow: /y\n", []check{
			{"", "/x", true}, {"", "/y", false},
		}},
		{"case and whitespace", "  USER-AGENT  :   *  \n\tDISALLOW\t:\t/x\t\n", []check{{"", "/x", false}}},
		{"misspellings", "useragent: a\nDisallow: /x\nuser agent: b\ndissallow: /y\n", []check{
			{"a", "/x", false}, {"b", "/y", false},
		}},
		{"no colon and garbage", "User-agent: *\nDisallow /x\n\x00\xff:\nfoo\nDisallow: /y\n", []check{
			{"", "/x", true}, {"", "/y", false},
		}},
		{"colon in value", "User-agent: *\nDisallow: /a:b\n", []check{{"", "/a:b", false}, {"", "/a", true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runChecks(t, ParseBytes([]byte(tt.robots)), tt.checks)
		})
	}
}

func TestPathNormalisation(t *testing.T) {
	r := ParseBytes([]byte("User-agent: *\nDisallow: /$\nDisallow: /a$\n"))
	runChecks(t, r, []check{
		{"", "", false},     // empty path is "/"
		{"", "a", false},    // a missing '/' is added
		{"", "/a#x", false}, // fragments are dropped
		{"", "/b", true},
	})

	// Long paths are truncated, not rejected.
	r = ParseBytes([]byte("User-agent: *\nDisallow: /a*b\n"))
	long := "/a" + strings.Repeat("x", 1<<20) + "b"
	assert.True(t, r.Allowed("", long))
	assert.False(t, r.Allowed("", "/a"+strings.Repeat("x", maxPathLen-10)+"b"))
	assert.Len(t, normalizePath(strings.Repeat("%41", 1<<20)), maxPathLen)
	assert.Equal(t, "/"+strings.Repeat("A", maxPathLen-1), normalizePath("/"+strings.Repeat("%41", 1<<20)))
}

func TestCrawlDelay(t *testing.T) {
	tests := []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"10", 10 * time.Second, true},
		{"0", 0, true},
		{"0.5", 500 * time.Millisecond, true},
		{".5", 500 * time.Millisecond, true},
		{"2.25", 2250 * time.Millisecond, true},
		{"3.", 3 * time.Second, true},
		{"0.001", time.Millisecond, true},
		{"1000000", 1e6 * time.Second, true},
		{"99999999999", 1e6 * time.Second, true},
		{strings.Repeat("9", 400), 1e6 * time.Second, true},
		{"-1", 0, false},
		{"NaN", 0, false},
		{"nan", 0, false},
		{"abc", 0, false},
		{"1e400", 0, false},
		{"1e3", 0, false},
		{"Inf", 0, false},
		{"+Inf", 0, false},
		{"-Inf", 0, false},
		{"0x10", 0, false},
		{"1_000", 0, false},
		{"1.2.3", 0, false},
		{".", 0, false},
		{"", 0, false},
		{"5 seconds", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			r := ParseBytes([]byte("User-agent: *\nCrawl-delay: " + tt.value + "\n"))
			d, ok := r.CrawlDelay("bot/1.0")
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, d)
		})
	}

	// Several applicable values: the largest wins, within and across groups.
	r := ParseBytes([]byte(`User-agent: bot
Crawl-delay: 2
Crawl-delay: 1
Crawl-delay: junk

User-agent: other
Crawl-delay: 100

User-agent: bot
Crawl-delay: 5

User-agent: *
Crawl-delay: 50

User-agent: quiet
Disallow: /x
`))
	d, ok := r.CrawlDelay("Bot/2.0")
	assert.True(t, ok)
	assert.Equal(t, 5*time.Second, d)
	d, ok = r.CrawlDelay("unknown")
	assert.True(t, ok)
	assert.Equal(t, 50*time.Second, d)
	// A matching group without Crawl-delay does not inherit the "*" value.
	_, ok = r.CrawlDelay("quiet")
	assert.False(t, ok)
}

func TestRequestRate(t *testing.T) {
	tests := []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"1/5", 5 * time.Second, true},
		{"1/5s", 5 * time.Second, true},
		{"1/5S", 5 * time.Second, true},
		{"3/1m", 20 * time.Second, true},
		{"100/1h", 36 * time.Second, true},
		{"2/1", 500 * time.Millisecond, true},
		{"1/0.5", 500 * time.Millisecond, true},
		{"0.5/1", 2 * time.Second, true},
		{"1 / 10s", 10 * time.Second, true},
		{"1/10s 0600-0845", 10 * time.Second, true},
		{"1/99999999h", 1e6 * time.Second, true},
		{"1/" + strings.Repeat("9", 400), 1e6 * time.Second, true},
		{strings.Repeat("9", 400) + "/1", 0, true},
		{"0/5", 0, false},
		{"5/0", 0, false},
		{"0/0", 0, false},
		{"-1/5", 0, false},
		{"1/-5", 0, false},
		{"1/5x", 0, false},
		{"1/", 0, false},
		{"/5", 0, false},
		{"1/s", 0, false},
		{"5", 0, false},
		{"abc", 0, false},
		{"NaN/1", 0, false},
		{"1/Inf", 0, false},
		{"1/5/6", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			r := ParseBytes([]byte("User-agent: *\nRequest-rate: " + tt.value + "\n"))
			d, ok := r.RequestRate("bot")
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, d)
		})
	}
}

func TestDelay(t *testing.T) {
	tests := []struct {
		name, robots string
		want         time.Duration
		ok           bool
	}{
		{"crawl-delay larger", "Crawl-delay: 10\nRequest-rate: 1/5", 10 * time.Second, true},
		{"request-rate larger", "Crawl-delay: 1\nRequest-rate: 3/1m", 20 * time.Second, true},
		{"only crawl-delay", "Crawl-delay: 0.5", 500 * time.Millisecond, true},
		{"only request-rate", "Request-rate: 100/1h", 36 * time.Second, true},
		{"neither valid", "Crawl-delay: x\nRequest-rate: 0/1", 0, false},
		{"none", "Disallow: /", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ParseBytes([]byte("User-agent: bot\n" + tt.robots + "\n"))
			d, ok := r.Delay("bot")
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, d)
		})
	}
}

// bigRobots returns a robots.txt longer than MaxSize with "Disallow:
// /before" near the start and "Disallow: /after" beyond the cut.
func bigRobots() []byte {
	var b bytes.Buffer
	b.WriteString("User-agent: *\nDisallow: /before\n")
	line := "# " + strings.Repeat("padding ", 12) + "\n"
	for b.Len() < MaxSize+1000 {
		b.WriteString(line)
	}
	b.WriteString("Disallow: /after\n")
	return b.Bytes()
}

func TestMaxRobotsSize(t *testing.T) {
	body := bigRobots()
	require.Greater(t, len(body), MaxSize)

	fromReader, err := Parse(bytes.NewReader(body))
	require.NoError(t, err)
	for _, r := range []*Robots{fromReader, ParseBytes(body)} {
		assert.False(t, r.Allowed("bot", "/before"))
		assert.True(t, r.Allowed("bot", "/after"))
	}

	// A rule line that ends exactly at the limit is seen.
	prefix := "User-agent: *\n"
	rule := "Disallow: /last\n"
	pad := MaxSize - len(prefix) - len(rule)
	body = []byte(prefix + strings.Repeat("#", pad-1) + "\n" + rule + "Disallow: /after\n")
	assert.False(t, ParseBytes(body).Allowed("bot", "/last"))
	assert.True(t, ParseBytes(body).Allowed("bot", "/after"))

	// A line cut by the limit is dropped rather than parsed truncated:
	// "Disallow: /abc" cut to "Disallow: /" must not block everything.
	body = []byte(prefix + strings.Repeat("#", MaxSize-len(prefix)-len("Disallow: /")-1) + "\nDisallow: /abc\n")
	r, err := Parse(bytes.NewReader(body))
	require.NoError(t, err)
	assert.True(t, r.Allowed("bot", "/x"))
	assert.True(t, ParseBytes(body).Allowed("bot", "/x"))
}

// endless is a reader that never ends and counts what it hands out.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	const pattern = "User-agent: *\nDisallow: /x\nCrawl-delay: 1\n"
	for i := range p {
		p[i] = pattern[(e.n+i)%len(pattern)]
	}
	e.n += len(p)
	return len(p), nil
}

func TestEndlessReader(t *testing.T) {
	src := &endless{}
	done := make(chan struct{})
	var r *Robots
	var err error
	go func() {
		defer close(done)
		r, err = Parse(src)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Parse did not return on an endless reader")
	}
	require.NoError(t, err)
	assert.LessOrEqual(t, src.n, MaxSize)
	assert.False(t, r.Allowed("bot", "/x"))
	assert.True(t, r.Allowed("bot", "/y"))
}

func TestReaderError(t *testing.T) {
	boom := errors.New("boom")
	for _, src := range []io.Reader{
		iotest.ErrReader(boom),
		io.MultiReader(strings.NewReader("User-agent: *\nDisallow: /\n"), iotest.ErrReader(boom)),
	} {
		r, err := Parse(src)
		require.Error(t, err)
		assert.ErrorIs(t, err, boom)
		assert.Nil(t, r)
	}

	// Short reads and a final (n, io.EOF) are fine.
	r, err := Parse(iotest.DataErrReader(iotest.OneByteReader(strings.NewReader("User-agent: *\nDisallow: /x"))))
	require.NoError(t, err)
	assert.False(t, r.Allowed("bot", "/x"))
}

func TestRuleCap(t *testing.T) {
	p := parser{r: &Robots{}, cur: -1}
	p.line([]byte("User-agent: *"))
	for i := 0; i < maxRules+10; i++ {
		p.line([]byte("Disallow: /a"))
	}
	p.line([]byte("Disallow: /b"))
	p.finish()
	assert.Len(t, p.r.groups[0].rules, maxRules)
	assert.False(t, p.r.Allowed("", "/a"))
	assert.True(t, p.r.Allowed("", "/b"))
}

func TestPathologicalPatterns(t *testing.T) {
	// Patterns that make backtracking matchers exponential or quadratic.
	var b strings.Builder
	b.WriteString("User-agent: *\n")
	rule := "Disallow: /" + strings.Repeat("*a", 200) + "*b\n"
	for b.Len()+len(rule) < MaxSize {
		b.WriteString(rule)
	}
	// The path is cut to maxPathLen and each rule is matched without
	// backtracking, so this is about a thousand linear scans of 8 KiB; a
	// matcher that backtracked would not return, and go test's -timeout
	// would name this test.
	r := ParseBytes([]byte(b.String()))
	path := "/" + strings.Repeat("a", 1<<20)
	assert.True(t, r.Allowed("bot", path))
}

func TestConcurrentReads(t *testing.T) {
	r := ParseBytes([]byte(rfcSimpleExample + "\nUser-agent: *\nCrawl-delay: 1\n"))
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				assert.False(t, r.Allowed("foobot", fmt.Sprintf("/x%d", j)))
				_, _ = r.Delay("otherbot")
			}
		}()
	}
	wg.Wait()
}

// refMatch is a straightforward dynamic-programming reference for rule
// matching, used to cross-check rule.matches.
func refMatch(ru rule, s string) bool {
	p := ru.pattern
	if !ru.anchored {
		p += "*"
	}
	// dp[j]: p[:i] matches s[:j].
	dp := make([]bool, len(s)+1)
	dp[0] = true
	for i := 0; i < len(p); i++ {
		next := make([]bool, len(s)+1)
		if p[i] == '*' {
			next[0] = dp[0]
			for j := 1; j <= len(s); j++ {
				next[j] = dp[j] || next[j-1]
			}
		} else {
			for j := 1; j <= len(s); j++ {
				next[j] = dp[j-1] && s[j-1] == p[i]
			}
		}
		dp = next
	}
	return dp[len(s)]
}

func FuzzParseRobots(f *testing.F) {
	f.Add([]byte(rfcSimpleExample), "foobot", "/example/page.html")
	f.Add([]byte(rfcSimpleExample), "barbot/1.0", "/example/page.html")
	f.Add([]byte("User-agent: *\nDisallow: /*.php$\nAllow: /a*b*c\n"), "bot", "/abc.php")
	f.Add([]byte("\xEF\xBB\xBFUser-agent: MyBot\r\nDisallow: /%7Efoo\r\nCrawl-delay: 0.5\r\nRequest-rate: 3/1m\r\n"), "MyBot/2.1", "/~foo")
	f.Add([]byte("User-agent: *\rDisallow: /foo/bar/ツ\rCrawl-delay: 1e400\r"), "", "/foo/bar/%e3%83%84")
	f.Add([]byte("Disallow: /x\nuser-agent: a\nuser-agent: b\nallow: /$\ndisallow: /\nrequest-rate: 100/1h 0000-2359\n"), "B", "/")
	f.Add([]byte("User-agent: *\nDisallow: /a%\nCrawl-delay: "+strings.Repeat("9", 40)+"\n"), "x", "/a%25#frag")
	f.Add([]byte(""), "", "")

	f.Fuzz(func(t *testing.T, data []byte, agent, path string) {
		// Bounded work per input: the parse is linear, the reference
		// matcher below is budgeted, and past the caps goes overCap.
		if len(data) > 64<<10 || len(agent) > 1<<10 || len(path) > 64<<10 {
			t.Skip()
		}
		if len(data) > 0 && crc32.ChecksumIEEE(data)%64 == 0 {
			// One input in 64, by a hash: the fuzzer can't make every
			// input (or its minimisation) pay for three 500 KiB parses.
			robotsOverCap(t, data, agent, path)
		}
		r := ParseBytes(data)
		r2, err := Parse(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}

		allowed := r.Allowed(agent, path)
		if allowed != r2.Allowed(agent, path) {
			t.Fatalf("Parse and ParseBytes disagree")
		}
		if !r.Allowed(agent, "/robots.txt") {
			t.Fatalf("/robots.txt disallowed")
		}

		cd, cdOK := r.CrawlDelay(agent)
		rr, rrOK := r.RequestRate(agent)
		d, ok := r.Delay(agent)
		for _, v := range []time.Duration{cd, rr, d} {
			if v < 0 || v > maxDelaySeconds*time.Second {
				t.Fatalf("delay out of range: %v", v)
			}
		}
		if ok != (cdOK || rrOK) || d != max(cd, rr) {
			t.Fatalf("Delay = %v, %v; CrawlDelay = %v, %v; RequestRate = %v, %v", d, ok, cd, cdOK, rr, rrOK)
		}

		checkAllowed(t, r, agent, path, allowed)
	})
}

// checkAllowed cross-checks Allowed's answer for path, and its matching
// and rule precedence, against a naive reference.
func checkAllowed(t *testing.T, r *Robots, agent, path string, allowed bool) {
	t.Helper()
	np := normalizePath(path)
	if len(np) > maxPathLen {
		t.Fatalf("normalised path too long: %d", len(np))
	}
	if p, _, _ := strings.Cut(np, "?"); p == "/robots.txt" {
		return
	}
	bestLen, want := -1, true
	budget := 1 << 22 // keep the quadratic reference cheap
	for _, i := range r.matching(agent) {
		for _, ru := range r.groups[i].rules {
			if budget -= (len(ru.pattern) + 1) * (len(np) + 1); budget < 0 {
				return
			}
			m := refMatch(ru, np)
			if m != ru.matches(np) {
				t.Fatalf("pattern %q (anchored %v) on %q: matches = %v, reference %v", ru.pattern, ru.anchored, np, !m, m)
			}
			if m && (ru.length > bestLen || ru.length == bestLen && ru.allow) {
				bestLen, want = ru.length, ru.allow
			}
		}
	}
	if allowed != want {
		t.Fatalf("Allowed = %v, reference %v", allowed, want)
	}
}

// robotsOverCap feeds the parser and the matcher inputs past their caps,
// built from a fuzz input: the file repeated past MaxSize (as bytes,
// and as an endless reader), and the path stretched past what Allowed
// reads. What lies past a cap changes nothing, and the parse keeps within
// maxRules rules and a bounded size.
func robotsOverCap(t *testing.T, data []byte, agent, path string) {
	big := bytes.Repeat(data, MaxSize/len(data)+2)
	r := ParseBytes(big)
	// The documented cut: the first MaxSize bytes, less a last line
	// that is not terminated.
	cut := big[:MaxSize]
	if i := bytes.LastIndexAny(cut, "\r\n"); i >= 0 {
		cut = cut[:i+1]
	} else {
		cut = nil
	}
	if want := ParseBytes(cut); !reflect.DeepEqual(r, want) {
		t.Fatalf("a %d-byte file parses unlike its first %d bytes", len(big), len(cut))
	}
	// An endless body of the same bytes: read up to the cap, and no more.
	endless := &countingReader{r: &repeatReader{b: data}}
	r2, err := Parse(endless)
	if err != nil {
		t.Fatalf("Parse(endless): %v", err)
	}
	if endless.n > MaxSize {
		t.Fatalf("Parse read %d bytes of an endless body, more than %d", endless.n, MaxSize)
	}
	if !reflect.DeepEqual(r2, r) {
		t.Fatalf("Parse(endless) parses unlike the file cut at the cap")
	}
	rules, size := 0, 0
	for _, g := range r.groups {
		rules += len(g.rules)
		for _, ru := range g.rules {
			size += len(ru.pattern)
		}
	}
	// Normalising encodes a raw non-ASCII byte as %XX: at most 3 bytes
	// of pattern for one of input.
	if rules > maxRules || size > 3*MaxSize {
		t.Fatalf("%d rules, %d bytes of patterns from a %d-byte window", rules, size, MaxSize)
	}
	long := path + strings.Repeat("a", 3*maxPathLen+3)
	if len(path) > 0 {
		mid := len(path) / 2
		long = path[:mid] + strings.Repeat(path[mid:mid+1], 3*maxPathLen+3) + path[mid:]
	}
	checkAllowed(t, r, agent, long, r.Allowed(agent, long))
}

// repeatReader reads b over and over, without end.
type repeatReader struct {
	b []byte
	i int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.b[r.i:])
		n += c
		r.i = (r.i + c) % len(r.b)
	}
	return n, nil
}

// countingReader counts what is read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
