package dashboard

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSafeNextKeepsTheRedirectOnThisSite: the target after login is
// taken from the request, so a link can carry any value. Browsers drop
// tabs and newlines from a Location, read a backslash as a slash and
// resolve "//host" and "/.//host" against nothing but themselves; every
// such value must become "/", and the dashboard's own paths stay as they
// are.
func TestSafeNextKeepsTheRedirectOnThisSite(t *testing.T) {
	bad := []string{
		"", "evil.example", "outbox", " /outbox", "\t/outbox",
		"//evil.example", "///evil.example", "////evil.example", "//evil.example/outbox",
		"/\t/evil.example", "/\n/evil.example", "/\r/evil.example", "/\r\n/evil.example", "\t//evil.example",
		"/\x00/evil.example", "/\x7f/evil.example", "/ /evil.example", "/outbox\n", "/out\tbox",
		"/\\evil.example", "\\\\evil.example", "\\/evil.example", "/\\/evil.example", "/outbox\\..\\x",
		"/%2f%2fevil.example", "/%2F%2Fevil.example", "/%2f/evil.example", "/%5cevil.example", "/%5Cevil.example",
		"/%09/evil.example", "/%0a/evil.example", "/%0d%0a/evil.example", "/%00",
		"/.//evil.example", "/./evil.example/../..//x", "/..//evil.example", "/%2e//evil.example", "/%2e%2e//evil.example",
		"/x/..//evil.example", "/./", "/../x",
		"javascript:alert(1)", "JavaScript:alert(1)", " javascript:alert(1)", "/javascript:alert(1)//x/..//evil",
		"http://evil.example", "https://evil.example/outbox", "http:/evil.example", "http:evil.example", "data:text/html,x",
		"/\u3002evil.example", "/\u00a0/evil.example", "/\u2028/evil.example", "/\ufeff/evil.example",
		"/outbox#//evil.example", "/%zz",
	}
	for _, next := range bad {
		assert.Equal(t, "/", safeNext(next), "%q", next)
	}
	good := []string{
		"/", "/outbox", "/outbox?status=parked", "/outbox?status=parked&key=order-17&limit=10",
		"/outbox/row?id=01J9ZK3R6Y2Q8V4E7T5W1N0M3P", "/consumers/message?group=shipping&id=01J9",
		"/tx?q=order%2F17", "/tx?q=a%2F%2Fb", "/tx?q=%5C", "/broker", "/outbox?key=a//b",
	}
	for _, next := range good {
		assert.Equal(t, next, safeNext(next), "%q", next)
	}
	// What the dashboard itself puts in next: a request URI, query-escaped.
	for _, uri := range []string{"/outbox?status=parked&topic=orders", "/tx?q=x%20y"} {
		dec, err := url.QueryUnescape(url.QueryEscape(uri))
		require.NoError(t, err)
		require.Equal(t, uri, safeNext(dec))
	}
}
