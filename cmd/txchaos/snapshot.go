package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/txmsg/txmsg/adapters/outbox"
	"github.com/txmsg/txmsg/checker"
)

// snapshot reads the final state.
func (r *runner) snapshot(ctx context.Context, stored map[string][]storedMsg, complete bool) (*snapshot, error) {
	s := &snapshot{Orders: map[string]orderRow{}, Barrier: map[string]string{}, Outbox: map[string]outbox.Status{},
		Stored: map[string][]storedMsg{}, StoredComplete: complete, TxGroup: r.txGroup(),
		LateBound: r.cfg.DelayLateBound}
	var err error
	if s.Attempts, err = readAttempts(r.attemptDir); err != nil {
		return nil, err
	}
	db := r.db.WithContext(ctx)
	var orders []orderRow
	if err := db.Table(ordersTable).Find(&orders).Error; err != nil {
		return nil, err
	}
	for _, o := range orders {
		s.Orders[o.ID] = o
	}
	if err := db.Table(effectsTable).Order("id").Find(&s.Effects).Error; err != nil {
		return nil, err
	}
	var barrier []checker.Barrier
	if err := db.Table(checker.DefaultTable).Find(&barrier).Error; err != nil {
		return nil, err
	}
	for _, b := range barrier {
		s.Barrier[b.TxID] = b.State
	}
	var rows []struct {
		MsgID  string
		Status outbox.Status
	}
	if err := db.Table(outbox.DefaultTable).Select("msg_id, status").Scan(&rows).Error; err != nil {
		return nil, err
	}
	for _, row := range rows {
		s.Outbox[row.MsgID] = row.Status
	}
	for mode, topic := range r.topics {
		s.Stored[mode] = stored[topic]
	}
	if f, err := os.Create(filepath.Join(r.dir, "faults.json")); err == nil {
		_ = json.NewEncoder(f).Encode(r.faults)
		_ = f.Close()
	}
	return s, nil
}
