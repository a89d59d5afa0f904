//! Slurm's host lists (`SLURM_JOB_NODELIST`, and srun's `--nodelist`, which Slurm's
//! `pmi2` plugin fills from a spawn's `host` info key): host names joined by commas,
//! each with any number of bracketed ranges and numbers (`rbtl-n[1-2,5]`,
//! `c[01-10]-ib`), a range's numbers as wide as its first (`[08-10]`: `08`, `09`,
//! `10`). Written here rather than taken from the `hostlist-parser` crate, which
//! brings a parser-combinator library for these few rules.

/// The most host names a list may name.
pub const HOSTS_MAX: usize = 1 << 16;

/// The host names of `list`, in its order; what is malformed, or names more than
/// [`HOSTS_MAX`] hosts, is refused with why.
pub fn expand(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for item in split_outside_brackets(list)? {
        if item.is_empty() {
            return Err(format!("an empty host name in {list:?}"));
        }
        expand_item(item, String::new(), &mut hosts)
            .map_err(|why| format!("{why} in the host list {list:?}"))?;
    }
    Ok(hosts)
}

/// `list` cut at the commas outside brackets; brackets must pair, unnested.
fn split_outside_brackets(list: &str) -> Result<Vec<&str>, String> {
    let (mut items, mut start, mut open) = (Vec::new(), 0, false);
    for (i, c) in list.char_indices() {
        match c {
            '[' if open => return Err(format!("a bracket inside brackets in {list:?}")),
            ']' if !open => return Err(format!("a ']' without its '[' in {list:?}")),
            '[' | ']' => open = !open,
            ',' if !open => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if open {
        return Err(format!("a '[' without its ']' in {list:?}"));
    }
    items.push(&list[start..]);
    Ok(items)
}

/// Every host name of `item` (no comma outside brackets, brackets paired), each
/// after `prefix`, appended to `hosts`.
fn expand_item(item: &str, prefix: String, hosts: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = item.find('[') else {
        if hosts.len() >= HOSTS_MAX {
            return Err(format!("more than {HOSTS_MAX} hosts"));
        }
        hosts.push(prefix + item);
        return Ok(());
    };
    let close = open + item[open..].find(']').ok_or("a '[' without its ']'")?;
    let (head, tail) = (&item[..open], &item[close + 1..]);
    for range in item[open + 1..close].split(',') {
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let (low, high) = (number(first)?, number(last)?);
        if low > high {
            return Err(format!("the range {range:?} runs backwards"));
        }
        if (high - low) as usize >= HOSTS_MAX - hosts.len().min(HOSTS_MAX) {
            return Err(format!("more than {HOSTS_MAX} hosts"));
        }
        for n in low..=high {
            let name = format!("{prefix}{head}{n:0width$}", width = first.len());
            expand_item(tail, name, hosts)?;
        }
    }
    Ok(())
}

/// A range's bound: decimal digits.
fn number(text: &str) -> Result<u64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not a number of a range"));
    }
    text.parse()
        .map_err(|_| format!("{text:?} is too large a number"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hosts(list: &str) -> Vec<String> {
        expand(list).unwrap_or_else(|e| panic!("{list:?}: {e}"))
    }

    #[test]
    fn names_ranges_and_widths_expand_as_slurm_writes_them() {
        assert_eq!(hosts("rbtl-n1"), ["rbtl-n1"]);
        assert_eq!(hosts("rbtl-n[1-2]"), ["rbtl-n1", "rbtl-n2"]);
        assert_eq!(hosts("a[1,3-4],b"), ["a1", "a3", "a4", "b"]);
        assert_eq!(hosts("c[08-10]-ib"), ["c08-ib", "c09-ib", "c10-ib"]);
        assert_eq!(hosts("r[1-2]n[1-2]"), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert_eq!(hosts("n[7]"), ["n7"]);
    }

    #[test]
    fn malformed_lists_are_refused_with_why() {
        for (list, why) in [
            ("", "empty host name"),
            ("a,,b", "empty host name"),
            ("n[1-2", "without its ']'"),
            ("n1-2]", "without its '['"),
            ("n[[1]]", "inside brackets"),
            ("n[]", "not a number"),
            ("n[a-b]", "not a number"),
            ("n[1-]", "not a number"),
            ("n[3-1]", "backwards"),
            ("n[0-99999999999]", "more than"),
            ("n[0-99999999999999999999999]", "too large"),
            ("a[0-300]b[0-300]", "more than"),
        ] {
            let e = expand(list).expect_err(list);
            assert!(e.contains(why), "{list:?}: {e}");
        }
    }

    proptest! {
        #![proptest_config(crate::pmi::fuzz::config())]

        /// Any text: host names or a refusal, never a panic, never more than the bound.
        #[test]
        fn any_list_expands_or_is_refused(list in "[a-z0-9,\\[\\]\\-]{0,24}") {
            if let Ok(h) = expand(&list) {
                prop_assert!(h.len() <= HOSTS_MAX);
            }
        }
    }
}
