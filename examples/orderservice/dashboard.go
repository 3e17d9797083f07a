package main

import "github.com/txmsg/txmsg/dashboard"

// opsDashboard is txmsg's dashboard as the service mounts it.
type opsDashboard = dashboard.Dashboard

// newDashboard builds txmsg's dashboard over the service's tables (their
// default names), showing the health of the mode's components and of the
// inventory consumer. It is read-only and has no token, so it answers
// clients on this machine only.
func (a *App) newDashboard() (*opsDashboard, error) {
	return dashboard.New(a.db, dashboard.Config{
		Inbox: a.inbox, Title: "orderservice", Logger: a.log,
		Health: []dashboard.HealthCheck{
			{Name: "events", Check: a.mode.Health},
			{Name: "inventory consumer", Check: a.consumer.Health},
		},
	})
}
