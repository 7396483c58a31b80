package train

import "fmt"

// setting is one configuration value a checkpoint records, so that a
// resume with other flags is refused before any expensive work, naming
// each setting that differs.
type setting struct {
	Name  string `msgpack:"name"`
	Value string `msgpack:"value"`
}

func orAuto(s string) string {
	if s == "" || s == "0" {
		return "auto"
	}
	return s
}

// Values of the "seed" setting.
const (
	seedNone  = "none (crypto/rand)"
	seedGiven = "given"
)

// seedSetting records whether the run's generators (sampler, noise,
// initialization, augmentation) come from a caller's seed or from
// crypto/rand: a checkpoint continues its generators, so a resume that
// changes this would make the run's claim about its noise false.
func seedSetting(seed []byte) setting {
	if seed == nil {
		return setting{"seed", seedNone}
	}
	return setting{"seed", seedGiven}
}

func find(s []setting, name string) (setting, bool) {
	for _, v := range s {
		if v.Name == name {
			return v, true
		}
	}
	return setting{}, false
}

// unsetValue is what a checkpoint's silence about a setting that
// settings records only when set means: its run used the default. It is
// false for a setting recorded always, which only a checkpoint of an
// earlier version lacks.
func unsetValue(name string) (string, bool) {
	switch name {
	case "features":
		return string(FeaturesPixels), true
	case "parameter average":
		return "none", true
	case "augment multiplicity":
		return "1", true
	case "unit of privacy":
		return "example", true
	case "warm-up steps":
		return "none", true
	}
	return "", false
}

// shown is a setting's value as a message names it ("none" for an empty
// one, such as no per-layer clip).
func shown(v string) string {
	if v == "" {
		return "none"
	}
	return v
}

// diffSettings names every setting whose value differs between the
// checkpoint (have) and the run (want), each in one clause without a
// semicolon (checkResume joins them with "; "). A setting recorded only
// when set and absent on one side is named with its default; one the
// checkpoint lacks because an earlier version wrote it is said to be
// unrecorded, and refused: it cannot be checked.
func diffSettings(have, want []setting) []string {
	hv := map[string]string{}
	for _, s := range have {
		hv[s.Name] = s.Value
	}
	var diffs []string
	seen := map[string]bool{}
	for _, s := range want {
		seen[s.Name] = true
		v, ok := hv[s.Name]
		switch {
		case ok && v == s.Value:
		case ok:
			diffs = append(diffs, fmt.Sprintf("%s: checkpoint has %s, asked for %s", s.Name, shown(v), shown(s.Value)))
		default:
			if d, optional := unsetValue(s.Name); optional {
				diffs = append(diffs, fmt.Sprintf("%s: checkpoint has %s (its run did not set it), asked for %s", s.Name, d, shown(s.Value)))
			} else {
				diffs = append(diffs, fmt.Sprintf("%s: asked for %s, but the checkpoint (written by an earlier version) does not record it, so it cannot be checked", s.Name, shown(s.Value)))
			}
		}
	}
	for _, s := range have {
		if seen[s.Name] {
			continue
		}
		if d, optional := unsetValue(s.Name); optional {
			diffs = append(diffs, fmt.Sprintf("%s: checkpoint has %s, asked for %s (not set in this run)", s.Name, shown(s.Value), d))
		} else {
			diffs = append(diffs, fmt.Sprintf("%s: checkpoint has %s, not set in this run", s.Name, shown(s.Value)))
		}
	}
	return diffs
}
