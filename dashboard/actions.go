package dashboard

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// actionResult is what an action did, shown on the page it returns to.
type actionResult struct {
	msg  string
	back string // path (with query) under the dashboard to return to
}

// action wraps a POST handler: it checks that actions are allowed, the
// operator's token and the CSRF token, bounds the form, logs who did what
// and redirects back with a signed message.
func (d *Dashboard) action(fn func(r *http.Request, who string) (*actionResult, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !d.cfg.AllowActions {
			d.fail(w, r, &httpError{status: http.StatusForbidden, title: "Read-only",
				msg: "This dashboard is read-only. Start it with actions allowed (txmsgctl serve -allow-actions, or Config.AllowActions) and a token."})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := r.ParseForm(); err != nil {
			d.fail(w, r, badRequest("The form could not be read: %v", err))
			return
		}
		if !d.csrfOK(r) {
			d.log.Warn("dashboard action refused: bad CSRF token", "who", d.who(r), "action", r.URL.Path)
			d.fail(w, r, &httpError{status: http.StatusForbidden, title: "Forbidden",
				msg: "The form's CSRF token is missing or wrong, or it came from another site. Reload the page and try again."})
			return
		}
		ctx, cancel := contextWithTimeout(r, d.cfg.QueryTimeout+30*time.Second)
		defer cancel()
		r = r.WithContext(ctx)
		who := d.who(r)
		res, err := fn(r, who)
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) {
				d.log.Error("dashboard action failed", "who", who, "action", r.URL.Path, "err", err)
			}
			d.fail(w, r, err)
			return
		}
		back := res.back
		sep := "?"
		if strings.Contains(back, "?") {
			sep = "&"
		}
		http.Redirect(w, r, basePath(r)+back+sep+"done="+url.QueryEscape(d.sealFlash(res.msg)), http.StatusSeeOther)
	}
}

// sealFlash signs an action's message so that a link cannot put words
// in the dashboard's mouth.
func (d *Dashboard) sealFlash(msg string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(msg)) + "." + d.mac("flash", msg)[:32]
}

func (d *Dashboard) openFlash(s string) string {
	enc, sig, ok := strings.Cut(s, ".")
	if !ok {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || sig != d.mac("flash", string(raw))[:32] {
		return ""
	}
	return string(raw)
}

// selection returns the form's "id" values: the rows to act on.
func selection(r *http.Request) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	for _, id := range r.PostForm["id"] {
		id = strings.TrimSpace(id)
		if id == "" || seen[id] {
			continue
		}
		if len(id) > maxQueryLen {
			return nil, badRequest("A txmsg ID is at most %d bytes; one of the selected is %d.", maxQueryLen, len(id))
		}
		seen[id] = true
		ids = append(ids, id)
	}
	switch {
	case len(ids) == 0:
		return nil, badRequest("Nothing was selected: tick the rows to act on.")
	case len(ids) > MaxSelection:
		return nil, badRequest("At most %d rows per action; %d were selected.", MaxSelection, len(ids))
	}
	return ids, nil
}

// backTo is the form's "back" value when it is a dashboard path, else def.
func backTo(r *http.Request, def string) string {
	b := r.PostFormValue("back")
	if b == "" || safeNext(b) != b {
		return def
	}
	return b
}

func (d *Dashboard) outboxRequeue(r *http.Request, who string) (*actionResult, error) {
	ids, err := selection(r)
	if err != nil {
		return nil, err
	}
	n, err := d.ob.Requeue(r.Context(), ids...)
	d.log.Info("dashboard action", "who", who, "action", "outbox.requeue", "txmsg_ids", ids, "requeued", n, "err", err)
	if err != nil {
		return nil, err
	}
	return &actionResult{msg: fmt.Sprintf("Requeued %d of %d selected row(s); rows that were not parked were left alone.", n, len(ids)),
		back: backTo(r, "/outbox?status=parked")}, nil
}

func (d *Dashboard) outboxPurge(r *http.Request, who string) (*actionResult, error) {
	ids, err := selection(r)
	if err != nil {
		return nil, err
	}
	n, err := d.ob.DeleteParked(r.Context(), ids...)
	d.log.Info("dashboard action", "who", who, "action", "outbox.purge", "txmsg_ids", ids, "deleted", n, "err", err)
	if err != nil {
		return nil, err
	}
	return &actionResult{msg: fmt.Sprintf("Deleted %d of %d selected parked row(s); rows that were not parked were kept.", n, len(ids)),
		back: backTo(r, "/outbox?status=parked")}, nil
}

// formGroup is the consumer group a parked-message action applies to.
func formGroup(r *http.Request) (string, error) {
	g := r.PostFormValue("group")
	switch {
	case g == "":
		return "", badRequest("The form names no consumer group.")
	case len(g) > maxQueryLen:
		return "", badRequest("A consumer group name is at most %d bytes.", maxQueryLen)
	}
	return g, nil
}

func (d *Dashboard) consumerReplay(r *http.Request, who string) (*actionResult, error) {
	if d.cfg.Publisher == nil {
		return nil, &httpError{status: http.StatusConflict, title: "No publisher",
			msg: "Replay publishes to the broker, and this dashboard has no publisher: give txmsgctl serve -namesrv, or set Config.Publisher."}
	}
	group, err := formGroup(r)
	if err != nil {
		return nil, err
	}
	ids, err := selection(r)
	if err != nil {
		return nil, err
	}
	done, err := d.inbox.RequeueParked(r.Context(), d.cfg.Publisher, group, ids...)
	replayed := make([]string, len(done))
	for i, p := range done {
		replayed[i] = p.ID
	}
	d.log.Info("dashboard action", "who", who, "action", "consumer.replay", "group", group, "txmsg_ids", ids, "replayed", replayed, "err", err)
	back := backTo(r, "/consumers?group="+url.QueryEscape(group))
	switch {
	case err != nil && len(done) == 0:
		return nil, err
	case err != nil:
		return &actionResult{msg: fmt.Sprintf("Replayed %d message(s); the others failed: %v", len(done), err), back: back}, nil
	case len(done) == 0:
		return nil, notFound("Group %q has none of the selected messages parked; they may have been replayed or purged already.", group)
	}
	return &actionResult{msg: fmt.Sprintf("Replayed %d message(s) with their txmsg IDs to group %s alone (its retry topic) and removed them from the parked list.", len(done), group), back: back}, nil
}

func (d *Dashboard) consumerPurge(r *http.Request, who string) (*actionResult, error) {
	group, err := formGroup(r)
	if err != nil {
		return nil, err
	}
	ids, err := selection(r)
	if err != nil {
		return nil, err
	}
	n, err := d.inbox.DeleteParked(r.Context(), group, ids...)
	d.log.Info("dashboard action", "who", who, "action", "consumer.purge", "group", group, "txmsg_ids", ids, "deleted", n, "err", err)
	if err != nil {
		return nil, err
	}
	return &actionResult{msg: fmt.Sprintf("Deleted %d of %d selected parked message(s).", n, len(ids)),
		back: backTo(r, "/consumers?group="+url.QueryEscape(group))}, nil
}

func contextWithTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}
