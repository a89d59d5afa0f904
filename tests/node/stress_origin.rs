//! The origin's side of the registration stress (`node/stress.rs`): for each batch the
//! target sends, it does the gets before, the puts, the gets after, checks what the
//! gets read, and answers once.

use super::{all_are, mark, pattern, table, timed, Check, Plan, Side, ALL};
use rbtl::btl::RemoteHandle;
use std::time::Duration;

/// A part the target asks the origin to write, as received.
struct Asked {
    round: u64,
    addr: u64,
    len: usize,
    check: u8,
    handle: RemoteHandle,
}

/// The next batch from the target (empty: the end), in the messages `send_batch`
/// (`node/stress_target.rs`) makes.
fn receive_batch(side: &mut Side<'_>) -> Vec<Asked> {
    let mut asked = Vec::new();
    loop {
        let msg = side.receive();
        let records = u32::from_le_bytes(msg[..4].try_into().unwrap());
        let mut at = 5;
        let word = |at: usize| u64::from_le_bytes(msg[at..at + 8].try_into().unwrap());
        for _ in 0..records {
            let hlen = usize::from(u16::from_le_bytes([msg[at + 25], msg[at + 26]]));
            asked.push(Asked {
                round: word(at),
                addr: word(at + 8),
                len: word(at + 16) as usize,
                check: msg[at + 24],
                handle: RemoteHandle::from_bytes(&msg[at + 27..at + 27 + hlen])
                    .expect("the target's handle"),
            });
            at += 27 + hlen;
        }
        if msg[4] == 1 {
            return asked;
        }
    }
}

/// Serve the target's batches until the end, then tell it where the time went.
pub(super) fn origin(side: &mut Side<'_>, plan: &Plan) {
    let table = table(plan.max_len);
    // A batch's parts side by side, in the rounds' order.
    let area = plan.batch * plan.max_len;
    let mut src = vec![0u8; area];
    let mut back = vec![0u8; area];
    // SAFETY: both buffers outlive their handles (dropped at the end of this function)
    // and are not resized.
    let (sh, bh) = unsafe {
        (
            side.m
                .register_mem(Some(side.ep), src.as_mut_ptr() as usize, area, ALL)
                .expect("register the origin's source"),
            side.m
                .register_mem(Some(side.ep), back.as_mut_ptr() as usize, area, ALL)
                .expect("register the origin's landing place"),
        )
    };
    let (src_at, back_at) = (src.as_ptr() as usize, back.as_ptr() as usize);
    let (mut times, mut moved) = ([Duration::ZERO; 3], [0u64; 3]);
    loop {
        let asked = receive_batch(side);
        if asked.is_empty() {
            break;
        }
        let mut at = Vec::with_capacity(asked.len());
        let mut end = 0;
        for a in &asked {
            assert!(
                a.len <= plan.max_len && end + a.len <= area,
                "a batch of {} parts fits in {area} bytes",
                asked.len()
            );
            pattern(&table, a.round, &mut src[end..end + a.len]);
            at.push(end);
            end += a.len;
        }
        let mut faults: Vec<Option<String>> = vec![None; asked.len()];
        // Gets before the puts, the puts, gets after them.
        for (step, kind) in [Check::GetBefore, Check::PutOnly, Check::GetAfter]
            .into_iter()
            .enumerate()
        {
            let put = kind == Check::PutOnly;
            let (local, lh) = if put { (src_at, &sh) } else { (back_at, &bh) };
            let jobs: Vec<_> = asked
                .iter()
                .zip(&at)
                .filter(|(a, _)| put || a.check == kind as u8)
                .map(|(a, &o)| (local + o, a.addr, &a.handle, a.len))
                .collect();
            moved[step] += jobs.iter().map(|j| j.3 as u64).sum::<u64>();
            timed(&mut times[step], || side.transfer_all(put, lh, &jobs));
        }
        for (i, (a, &o)) in asked.iter().zip(&at).enumerate() {
            let got = &back[o..o + a.len];
            if a.check == Check::GetBefore as u8 && !all_are(got, mark(a.round)) {
                faults[i] = Some(format!(
                    "round {}: a get before the put read other bytes than the marks ({:#x})",
                    a.round,
                    mark(a.round)
                ));
            }
            if a.check == Check::GetAfter as u8 && *got != src[o..o + a.len] {
                faults[i] = Some(format!(
                    "round {}: a get after the put read other bytes",
                    a.round
                ));
            }
        }
        // `[first round: u64][rounds: u64][a bit per round: faulty][the first fault]`.
        let mut reply = asked[0].round.to_le_bytes().to_vec();
        reply.extend_from_slice(&(asked.len() as u64).to_le_bytes());
        let mut flags = vec![0u8; asked.len().div_ceil(8)];
        for (i, f) in faults.iter().enumerate() {
            if f.is_some() {
                flags[i / 8] |= 1 << (i % 8);
            }
        }
        reply.extend_from_slice(&flags);
        if let Some(f) = faults.iter().flatten().next() {
            let room = side.m.attributes().max_send_size - reply.len();
            reply.extend_from_slice(&f.as_bytes()[..f.len().min(room)]);
        }
        side.send(&reply);
    }
    let mb = |b: u64| b as f64 / 1e6;
    let said = format!(
        "gets before {:.1} s ({:.1} MB), puts {:.1} s ({:.1} MB), gets after {:.1} s ({:.1} MB)",
        times[0].as_secs_f64(),
        mb(moved[0]),
        times[1].as_secs_f64(),
        mb(moved[1]),
        times[2].as_secs_f64(),
        mb(moved[2]),
    );
    let mut bye = b"bye".to_vec();
    bye.extend_from_slice(said.as_bytes());
    side.send(&bye);
    drop((sh, bh));
}
