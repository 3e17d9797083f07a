package rmqproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// The Docker path: the services namesrv and broker of docker/compose.yml,
// on the default ports only.

func dockerOK() bool {
	if _, err := exec.LookPath("docker"); err != nil {
		return false
	}
	return exec.Command("docker", "info").Run() == nil && exec.Command("docker", "compose", "version").Run() == nil
}

func (in *Instance) compose(args ...string) *exec.Cmd {
	args = append([]string{"compose", "--env-file", filepath.Join(in.cfg.Root, "scripts", "versions.env"),
		"-f", filepath.Join(in.cfg.Root, "docker", "compose.yml")}, args...)
	cmd := exec.Command("docker", args...)
	cmd.Env = append(os.Environ(), "ROCKETMQ_VERSION="+in.cfg.Version)
	return cmd
}

func (in *Instance) composeRun(args ...string) error {
	cmd := in.compose(args...)
	cmd.Stdout, cmd.Stderr = in.cfg.Log, in.cfg.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker compose %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func dockerRunning(in *Instance, service string) bool {
	out, err := in.compose("ps", "-q", "--status", "running", service).Output()
	return err == nil && strings.TrimSpace(string(out)) != ""
}

func (in *Instance) dockerStart(ctx context.Context) error {
	if !in.defaultPorts() {
		return fmt.Errorf("the Docker path publishes the default ports only (name server %d, broker %d): use TXMSG_ROCKETMQ_MODE=jar for other ports",
			defaultNSPort, defaultBrokerPort)
	}
	ns, br := dockerRunning(in, "namesrv"), dockerRunning(in, "broker")
	switch {
	case ns && br:
		in.logf("containers namesrv and broker already running; re-checking readiness")
	case !ns && !br && (portOpen(in.ns.addr()) || portOpen(in.brokers[0].addr())):
		in.logf("ports %d/%d are served by something not started here; will reuse it if it answers", in.ns.port, in.brokers[0].port)
		if err := WaitReady(ctx, in.cfg.NameServer, nil, in.cfg.Log); err != nil {
			return fmt.Errorf("ports %d/%d are served by something not started here, and RocketMQ at %s does not answer (%v): stop it or set TXMSG_NAMESRV",
				in.ns.port, in.brokers[0].port, in.cfg.NameServer, err)
		}
		in.logf("reusing the RocketMQ already serving %s", in.cfg.NameServer)
		return nil
	default:
		in.logf("starting apache/rocketmq:%s (namesrv, broker) with docker compose", in.cfg.Version)
		if err := in.composeRun("up", "-d", "namesrv", "broker"); err != nil {
			return err
		}
	}
	if err := WaitReady(ctx, in.cfg.NameServer, nil, in.cfg.Log); err != nil {
		_ = in.composeRun("logs", "--tail", "30", "namesrv", "broker")
		return fmt.Errorf("RocketMQ containers did not become ready: %w", err)
	}
	in.logf("RocketMQ %s ready: name server %s, broker %s", in.cfg.Version, in.cfg.NameServer, in.brokers[0].addr())
	in.logf("logs: docker compose -f docker/compose.yml logs broker (RocketMQ logs in the container under /home/rocketmq/logs/rocketmqlogs)")
	return nil
}

func (in *Instance) dockerStop() error {
	if err := in.composeRun("stop", "namesrv", "broker"); err != nil {
		return err
	}
	return in.composeRun("rm", "-f", "namesrv", "broker")
}

func (in *Instance) dockerSignal(sig syscall.Signal) error {
	switch sig {
	case syscall.SIGKILL:
		return in.composeRun("kill", "-s", "SIGKILL", "broker")
	case syscall.SIGSTOP:
		return in.composeRun("pause", "broker")
	default:
		return in.composeRun("unpause", "broker")
	}
}

func (in *Instance) dockerStatus() error {
	var res error
	for _, s := range []string{"namesrv", "broker"} {
		if dockerRunning(in, s) {
			fmt.Fprintf(in.cfg.Log, "%s: running (container)\n", s)
		} else {
			fmt.Fprintf(in.cfg.Log, "%s: not running\n", s)
			res = ErrNotRunning
		}
	}
	fmt.Fprintln(in.cfg.Log, "logs: docker compose -f docker/compose.yml logs namesrv broker")
	return res
}
