package model

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// AnnotationPrefix is the prefix of every annotation zerodrop reads.
const AnnotationPrefix = "zerodrop.dev/"

// Service annotations.
const (
	AnnotationBackendMode         = AnnotationPrefix + "backend-mode"
	AnnotationHealthCheckInterval = AnnotationPrefix + "health-check-interval"
	AnnotationDrainTimeout        = AnnotationPrefix + "drain-timeout"
	AnnotationMaxUnavailable      = AnnotationPrefix + "max-unavailable"
	AnnotationAddress             = AnnotationPrefix + "address"
	// AnnotationGateOnly="true" asks for the gates only: another controller
	// (the cloud's) writes the Service's load balancer, zerodrop reads it.
	AnnotationGateOnly = AnnotationPrefix + "gate-only"
	// AnnotationIgnore is read by `zerodrop check`; the controller accepts it.
	AnnotationIgnore = AnnotationPrefix + "ignore"
)

// knownAnnotations is every Service annotation of ServiceAnnotations (its
// init fills it): the documented ones are the accepted ones.
var knownAnnotations = map[string]bool{}

// Defaults for the Service options.
const (
	DefaultHealthCheckInterval = 2 * time.Second
	DefaultDrainTimeout        = 30 * time.Second
	DefaultRise                = 2
	DefaultFall                = 3
)

// DefaultMaxUnavailable is the share of serving backends one step may remove.
var DefaultMaxUnavailable = intstr.FromString("25%")

// ServiceConfig is what a Service's zerodrop annotations ask for, validated.
type ServiceConfig struct {
	Mode BackendMode
	// ModeDefault: no annotation names the mode, so Mode is the
	// provider's default (ParseServiceConfig's defaultMode), or IP mode where
	// Settle keeps it so (ModeKept says why).
	ModeDefault         bool
	ModeKept            string
	HealthCheckInterval time.Duration
	DrainTimeout        time.Duration
	MaxUnavailable      intstr.IntOrString
	Address             string
	// GateOnly: zerodrop serves the gates and writes nothing (GateOnly).
	GateOnly bool
}

// InvalidConfigError lists every problem with a Service's annotations, so the
// user sees them all at once.
type InvalidConfigError struct {
	Problems []string
	// Keys are the invalid annotations (ParseServiceConfig fills it; other
	// validators may leave it empty).
	Keys []string
}

// Invalid reports whether the annotation key is one of the problems.
func (e *InvalidConfigError) Invalid(key string) bool {
	for _, k := range e.Keys {
		if k == key {
			return true
		}
	}
	return false
}

func (e *InvalidConfigError) Error() string {
	return "invalid zerodrop annotations: " + strings.Join(e.Problems, "; ")
}

// ParseServiceConfig validates the zerodrop annotations. On error the caller
// must keep the Service's listeners as they are (invariant 7); the returned
// config then holds the valid annotations' values and the defaults in place of
// the invalid ones, for what still follows the cluster (the backends).
// defaultMode is the provider's backend mode for a Service whose annotation
// names none (provider.DefaultBackendMode; "" is IP mode): Settle then
// decides whether it applies.
func ParseServiceConfig(annotations map[string]string, defaultMode BackendMode) (ServiceConfig, error) {
	if defaultMode == "" {
		defaultMode = IPMode
	}
	cfg := ServiceConfig{
		Mode:                defaultMode,
		ModeDefault:         true,
		HealthCheckInterval: DefaultHealthCheckInterval,
		DrainTimeout:        DefaultDrainTimeout,
		MaxUnavailable:      DefaultMaxUnavailable,
	}
	var problems, invalid []string
	bad := func(key, value, why string) {
		problems = append(problems, fmt.Sprintf("%s=%q: %s", key, value, why))
		invalid = append(invalid, key)
	}
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if !strings.HasPrefix(key, AnnotationPrefix) {
			continue
		}
		value := annotations[key]
		// Only the documented annotations are accepted (ServiceAnnotations):
		// one read here but missing there is refused, and its tests fail.
		if !knownAnnotations[key] {
			bad(key, value, "unknown zerodrop annotation")
			continue
		}
		switch key {
		case AnnotationBackendMode:
			switch BackendMode(value) {
			case IPMode, NodeMode:
				cfg.Mode, cfg.ModeDefault = BackendMode(value), false
			default:
				bad(key, value, `must be "ip" or "node"`)
			}
		case AnnotationHealthCheckInterval:
			d, err := parseDuration(value, 100*time.Millisecond, time.Minute)
			if err != nil {
				bad(key, value, err.Error())
			} else {
				cfg.HealthCheckInterval = d
			}
		case AnnotationDrainTimeout:
			d, err := parseDuration(value, 0, time.Hour)
			if err != nil {
				bad(key, value, err.Error())
			} else {
				cfg.DrainTimeout = d
			}
		case AnnotationMaxUnavailable:
			v, err := parseMaxUnavailable(value)
			if err != nil {
				bad(key, value, err.Error())
			} else {
				cfg.MaxUnavailable = v
			}
		case AnnotationAddress:
			cfg.Address = value
		case AnnotationGateOnly:
			switch value {
			case "true", "false":
				cfg.GateOnly = value == "true"
			default:
				bad(key, value, `must be "true" or "false"`)
			}
		case AnnotationIgnore:
		}
	}
	if len(problems) > 0 {
		return cfg, &InvalidConfigError{Problems: problems, Keys: invalid}
	}
	return cfg, nil
}

// GateOnly reports whether a Service asks for the gates only (the
// annotation exactly "true"). The Service controller never writes such a
// Service, whatever its class says: the test is on the annotation alone, so
// that a malformed value elsewhere cannot make zerodrop take it over.
func GateOnly(annotations map[string]string) bool {
	return annotations[AnnotationGateOnly] == "true"
}

func parseDuration(s string, min, max time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration (use e.g. 2s, 500ms)")
	}
	if d < min || d > max {
		return 0, fmt.Errorf("must be between %s and %s", min, max)
	}
	return d, nil
}

func parseMaxUnavailable(s string) (intstr.IntOrString, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 100 {
			return intstr.IntOrString{}, errors.New("a percentage must be between 1% and 100%")
		}
		return intstr.FromString(s), nil
	}
	// Parsed as int32, the type the count is kept in: a larger value must be
	// refused, not wrap around to a negative count.
	n, err := strconv.ParseInt(s, 10, 32)
	if errors.Is(err, strconv.ErrRange) || err == nil && n < 1 {
		return intstr.IntOrString{}, fmt.Errorf("a count must be between 1 and %d", math.MaxInt32)
	}
	if err != nil {
		return intstr.IntOrString{}, errors.New("must be a positive integer or a percentage")
	}
	return intstr.FromInt32(int32(n)), nil
}
