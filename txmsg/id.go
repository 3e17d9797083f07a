package txmsg

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// idClock keeps IDs made in one process strictly increasing, even when the
// wall clock stalls or steps back.
type idClock struct {
	mu     sync.Mutex
	lastMS int64
	seq    uint16 // 12 bits used
}

// ids is the process-wide ID source. It is immutable after start except for
// its own locked counter.
var ids idClock

// NewID returns a new txmsg ID: a UUIDv7 (RFC 9562) in its canonical
// 36-character form. IDs sort by creation time; within one millisecond a
// 12-bit counter keeps them ordered in one process, and 62 random bits keep
// them unique across processes.
func NewID() string {
	var b [16]byte
	ids.next(&b, time.Now())
	return formatUUID(b)
}

func (c *idClock) next(b *[16]byte, now time.Time) {
	if _, err := rand.Read(b[6:]); err != nil {
		panic("txmsg: crypto/rand failed: " + err.Error())
	}
	ms := now.UnixMilli()
	c.mu.Lock()
	if ms > c.lastMS {
		c.lastMS = ms
		c.seq = uint16(b[6]&0x03)<<8 | uint16(b[7]) // random start leaves room to count up
	} else {
		c.seq++
		if c.seq > 0x0fff {
			c.lastMS++
			c.seq = 0
		}
		ms = c.lastMS
	}
	seq := c.seq
	c.mu.Unlock()

	b[0] = byte(ms >> 40)
	b[1] = byte(ms >> 32)
	b[2] = byte(ms >> 24)
	b[3] = byte(ms >> 16)
	b[4] = byte(ms >> 8)
	b[5] = byte(ms)
	b[6] = 0x70 | byte(seq>>8)&0x0f
	b[7] = byte(seq)
	b[8] = b[8]&0x3f | 0x80
}

func formatUUID(b [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// IDTime returns the creation time a UUIDv7 ID carries (to the
// millisecond), and false for an ID that is not a UUIDv7 in canonical
// form, such as one a caller chose.
func IDTime(id string) (time.Time, bool) {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' || id[14] != '7' {
		return time.Time{}, false
	}
	var b [16]byte
	if _, err := hex.Decode(b[0:4], []byte(id[0:8])); err != nil {
		return time.Time{}, false
	}
	if _, err := hex.Decode(b[4:6], []byte(id[9:13])); err != nil {
		return time.Time{}, false
	}
	for _, part := range [][2]int{{14, 18}, {19, 23}, {24, 36}} {
		var tmp [6]byte
		if _, err := hex.Decode(tmp[:(part[1]-part[0])/2], []byte(id[part[0]:part[1]])); err != nil {
			return time.Time{}, false
		}
	}
	switch id[19] {
	case '8', '9', 'a', 'b', 'A', 'B':
	default:
		return time.Time{}, false
	}
	ms := int64(b[0])<<40 | int64(b[1])<<32 | int64(b[2])<<24 | int64(b[3])<<16 | int64(b[4])<<8 | int64(b[5])
	return time.UnixMilli(ms), true
}
