//! Software cost of the message layer without any cache-line transfer: a process sends
//! 8-byte messages to itself and receives them (the `self` transport).
fn main() {
    let mut comm = rbtl::msg::Comm::init(&[]).expect("init");
    let me = comm.rank();
    let mut buf = [0u8; 8];
    let n: u32 = std::env::var("SELF_LOOP_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    for _ in 0..1000 {
        comm.send(&[1; 8], me, 1).unwrap();
        comm.recv(&mut buf, Some(me), Some(1)).unwrap();
    }
    let t = std::time::Instant::now();
    for _ in 0..n {
        comm.send(&[1; 8], me, 1).unwrap();
        comm.recv(&mut buf, Some(me), Some(1)).unwrap();
    }
    println!(
        "self_loop_ns_per_send_recv {:.1}",
        t.elapsed().as_nanos() as f64 / f64::from(n)
    );
}
