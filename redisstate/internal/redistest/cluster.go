package redistest

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of servers on loopback, each a primary
// holding a third (or 1/n) of the slots, without replicas.
type Cluster struct {
	Servers []*Server
}

// Addrs returns the nodes' host:port.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, s := range c.Servers {
		out = append(out, s.Addr())
	}
	return out
}

// StartCluster starts n redis-servers in cluster mode on free loopback
// ports (each with its cluster bus port, port + 10000, free too), joins
// them with redis-cli --cluster create, and waits until the cluster is
// ok. It skips t if redis-server or redis-cli is missing (see [Binary]).
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	bin := Binary(t)
	cli := lookPath(t, "redis-cli", "redis-tools")
	c := &Cluster{}
	for range n {
		s := &Server{t: t, bin: bin, dir: t.TempDir()}
		var err error
		for range 20 {
			s.port = clusterPort(t)
			s.args = []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "15000"}
			if err = s.start(); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("redistest: starting a cluster node: %v", err)
		}
		t.Cleanup(s.Kill)
		c.Servers = append(c.Servers, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok := true
		for _, s := range c.Servers {
			out, err := exec.Command(cli, "-p", strconv.Itoa(s.port), "cluster", "info").Output()
			if err != nil || !strings.Contains(string(out), "cluster_state:ok") {
				ok = false
				break
			}
		}
		if ok {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster not ok within 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterPort returns a free port whose cluster bus port (+10000) is free
// too.
func clusterPort(t testing.TB) int {
	for {
		p := FreePort(t)
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		if err != nil {
			continue
		}
		l.Close()
		return p
	}
}

// String describes the cluster.
func (c *Cluster) String() string { return fmt.Sprint(c.Addrs()) }
