package service

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"zerodrop.dev/zerodrop/internal/model"
)

// allocator hands out frontend addresses from a pool. Its memory is rebuilt
// from the Services' status on start, so a new leader keeps every address.
type allocator struct {
	pool netip.Prefix

	mu      sync.Mutex
	owner   map[netip.Addr]string // address → namespace/name
	service map[string]netip.Addr
}

func newAllocator(pool netip.Prefix) *allocator {
	return &allocator{pool: pool.Masked(), owner: map[netip.Addr]string{}, service: map[string]netip.Addr{}}
}

func (a *allocator) enabled() bool { return a.pool.IsValid() }

// assign gives svcKey the first usable of preferred, else the lowest free
// address of the pool.
func (a *allocator) assign(svcKey string, preferred ...string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range preferred {
		addr, err := netip.ParseAddr(p)
		if err != nil || !a.pool.Contains(addr) {
			continue
		}
		if o, taken := a.owner[addr]; taken && o != svcKey {
			continue
		}
		a.take(svcKey, addr)
		return addr.String(), nil
	}
	if addr, ok := a.service[svcKey]; ok {
		return addr.String(), nil
	}
	// Skip the network address; the rest of the prefix is usable on loopback
	// and in most on-prem pools.
	for addr := a.pool.Addr().Next(); a.pool.Contains(addr); addr = addr.Next() {
		if _, taken := a.owner[addr]; !taken {
			a.take(svcKey, addr)
			return addr.String(), nil
		}
	}
	return "", fmt.Errorf("address pool %s is exhausted", a.pool)
}

func (a *allocator) take(svcKey string, addr netip.Addr) {
	if old, ok := a.service[svcKey]; ok && old != addr {
		delete(a.owner, old)
	}
	a.owner[addr] = svcKey
	a.service[svcKey] = addr
}

// claim records an address that must not be given to anyone else, and
// reports whether svcKey may have it.
func (a *allocator) claim(svcKey, ip string) bool {
	addr, err := netip.ParseAddr(ip)
	if err != nil || !a.pool.Contains(addr) {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if o, taken := a.owner[addr]; taken && o != svcKey {
		return false
	}
	a.take(svcKey, addr)
	return true
}

// hold keeps ip from going to anyone but owner without making it owner's
// address: a frontend already listens on it at the provider (its Service has
// no status yet, or no Service wants it and it is about to be swept).
func (a *allocator) hold(owner, ip string) {
	addr, err := netip.ParseAddr(ip)
	if err != nil || !a.pool.Contains(addr) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, taken := a.owner[addr]; !taken {
		a.owner[addr] = owner
	}
}

// release frees svcKey's address and whatever was held for it.
func (a *allocator) release(svcKey string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.service, svcKey)
	for addr, o := range a.owner {
		if o == svcKey {
			delete(a.owner, addr)
		}
	}
}

// seedAllocator records the addresses Services already have, and holds the
// ones the provider's frontends listen on (after a restart a frontend may
// have no Service status, or no Service at all, yet): a new Service must not
// get an address HAProxy already serves.
func (c *Controller) seedAllocator(ctx context.Context) error {
	if !c.alloc.enabled() {
		return nil
	}
	var list corev1.ServiceList
	if err := c.cache.List(ctx, &list); err != nil {
		return fmt.Errorf("list services: %w", err)
	}
	for i := range list.Items {
		svc := &list.Items[i]
		if !c.managed(svc) || svc.DeletionTimestamp != nil {
			continue
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			c.alloc.claim(svc.Namespace+"/"+svc.Name, ing.IP)
		}
	}
	lbs, err := c.listLoadBalancers(ctx, true)
	if err != nil {
		return err
	}
	c.holdAddresses(lbs)
	return nil
}

// address chooses the frontend address of a Service: the one it asks for,
// else the one it has (status, or what the load balancer really listens on
// after a crash between apply and status), else a new one.
func (c *Controller) address(svc *corev1.Service, cfg model.ServiceConfig, observed *model.LoadBalancer) (string, error) {
	if c.opts.Role == RoleDataPlane {
		return statusAddress(svc, c.opts.StatusPool)
	}
	if !c.alloc.enabled() {
		return "", nil
	}
	key := svc.Namespace + "/" + svc.Name
	requested := cfg.Address
	if requested == "" {
		requested = svc.Spec.LoadBalancerIP
	}
	if requested != "" {
		addr, err := netip.ParseAddr(requested)
		if err != nil || !c.alloc.pool.Contains(addr) {
			return "", fmt.Errorf("requested address %q is not in the address pool %s", requested, c.alloc.pool)
		}
		if !c.alloc.claim(key, requested) {
			return "", fmt.Errorf("requested address %s is in use by another Service", requested)
		}
		return addr.String(), nil
	}
	var preferred []string
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		preferred = append(preferred, ing.IP)
	}
	if observed != nil {
		for _, l := range observed.Listeners {
			if strings.HasPrefix(l.Name, key+"/") {
				preferred = append(preferred, l.Address)
			}
		}
	}
	return c.alloc.assign(key, preferred...)
}
