//! The loads: clients on the Unix socket (sequential, concurrent, pipelined, windowed)
//! and a bare line echo for the ceiling.

use super::*;

pub async fn connect(path: &Path) -> (Lines, OwnedWriteHalf) {
    let (r, w) = UnixStream::connect(path)
        .await
        .expect("connect")
        .into_split();
    (TokioBufReader::new(r).lines(), w)
}

pub async fn round_trip(lines: &mut Lines, w: &mut OwnedWriteHalf, line: &[u8]) -> String {
    w.write_all(line).await.unwrap();
    lines.next_line().await.unwrap().expect("an answer")
}

pub fn percentile(sorted: &[Duration], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6
}

/// Median and p99 round trip, in microseconds, of `n` sequential requests of `line`, from a
/// blocking client on its own thread (so the client adds as little as possible).
pub fn sequential(path: &Path, line: &'static [u8], n: usize, errors: &mut u64) -> (f64, f64) {
    use std::io::Write;
    let stream = std::os::unix::net::UnixStream::connect(path).expect("connect");
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        answer.clear();
        let start = Instant::now();
        writer.write_all(line).unwrap();
        reader.read_line(&mut answer).unwrap();
        if i >= n / 10 {
            samples.push(start.elapsed());
        }
        if answer.contains("\"error\"") {
            *errors += 1;
        }
    }
    samples.sort();
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

pub async fn echo_server(path: PathBuf) {
    let listener = UnixListener::bind(&path).unwrap();
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        tokio::spawn(async move {
            let (r, mut w) = stream.into_split();
            let mut lines = TokioBufReader::new(r).lines();
            while let Ok(Some(mut line)) = lines.next_line().await {
                line.push('\n');
                if w.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
            }
        });
    }
}

/// Sets per second from `conns` connections each doing compare-and-set on its own key.
/// The text of a result's member `name` (e.g. `"version":`), read the way a lean client
/// reads an answer it knows the shape of (the Redis side parses no more than this).
pub fn field<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    if !answer.contains("\"result\"") {
        return None;
    }
    let rest = &answer[answer.find(name)? + name.len()..];
    let rest = rest.strip_prefix('"').unwrap_or(rest);
    let end = rest.find([',', '}', '"'])?;
    Some(&rest[..end])
}

/// Runs `client(c)` for each of `conns` clients at once, each doing `per_client`
/// operations and returning how many failed; the operations per second and the failures.
pub async fn clients<F, Fut>(conns: usize, per_client: usize, client: F) -> (f64, u64)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = u64> + Send + 'static,
{
    let start = Instant::now();
    let tasks: Vec<_> = (0..conns).map(|c| tokio::spawn(client(c))).collect();
    let mut errors = 0;
    for t in tasks {
        errors += t.await.unwrap();
    }
    let rate = (conns * per_client) as f64 / start.elapsed().as_secs_f64();
    (rate, errors)
}

/// Durable compare-and-set Sets per second from `conns` connections, each on its own key,
/// connection `c` on daemon `c % sockets.len()` (several daemons share one PostgreSQL).
pub async fn concurrent_cas_sets(sockets: &[PathBuf], conns: usize, per_conn: usize) -> (f64, u64) {
    cas_sets(sockets, conns, per_conn, None).await
}

/// [`concurrent_cas_sets`] with every Set fenced: connection `c`'s carry `fences[c]`.
pub async fn fenced_cas_sets(
    socket: &Path,
    conns: usize,
    per_conn: usize,
    fences: &Fences,
) -> (f64, u64) {
    let fences = std::sync::Arc::new(fences.0.iter().map(|(_, f)| f.clone()).collect());
    cas_sets(&[socket.to_path_buf()], conns, per_conn, Some(fences)).await
}

/// Leases held for the length of a load, one per connection, each on a key of its own,
/// and the `fence` member (text) a Set carries to write under it.
pub struct Fences(Vec<(serde_json::Value, String)>);

impl Fences {
    /// Acquires `n` leases (`tool:bench-fence-N`, an hour long) on one connection.
    pub async fn hold(path: &Path, n: usize) -> Fences {
        let (mut lines, mut w) = connect(path).await;
        let mut held = Vec::with_capacity(n);
        for c in 0..n {
            let key = format!("tool:bench-fence-{c}");
            let answer = call(&mut lines, &mut w, locks::acquire_request(&key, "bench")).await;
            let lease = answer["result"].clone();
            assert_eq!(lease["status"], "acquired", "{answer}");
            let fence =
                serde_json::json!({"resource_key": key, "lease_id": lease["lease_id"]}).to_string();
            held.push((lease, fence));
        }
        Fences(held)
    }

    /// Releases the leases; the number of releases refused.
    pub async fn release(self, path: &Path) -> u64 {
        let (mut lines, mut w) = connect(path).await;
        let mut errors = 0;
        for (lease, _) in &self.0 {
            let answer = call(&mut lines, &mut w, locks::release_request(lease)).await;
            if answer.get("result").is_none() {
                errors += 1;
                eprintln!("unexpected answer: {answer}");
            }
        }
        errors
    }
}

/// CAS Sets per second from `conns` connections each on its own key; with `fences`,
/// connection `c`'s carry `"fence": fences[c]`.
async fn cas_sets(
    sockets: &[PathBuf],
    conns: usize,
    per_conn: usize,
    fences: Option<std::sync::Arc<Vec<String>>>,
) -> (f64, u64) {
    // Each run its own keys, each starting from version 0.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    clients(conns, per_conn, |c| {
        let path = sockets[c % sockets.len()].clone();
        let fence = fences
            .as_ref()
            .map_or(String::new(), |f| format!(",\"fence\":{}", f[c]));
        async move {
            let (mut lines, mut w) = connect(&path).await;
            let mut version = 0u64;
            let mut errors = 0;
            for i in 0..per_conn {
                let line = format!(
                    "{{\"id\":{i},\"method\":\"Set\",\"params\":{{\"namespace\":\"bench\",\"key\":\"cas-{run}-{c}\",\"value\":{i},\"expected_version\":{version}{fence}}}}}\n"
                );
                let answer = round_trip(&mut lines, &mut w, line.as_bytes()).await;
                match field(&answer, "\"version\":").and_then(|v| v.parse().ok()) {
                    Some(v) => version = v,
                    None => {
                        errors += 1;
                        eprintln!("unexpected answer: {answer}");
                    }
                }
            }
            errors
        }
    })
    .await
}

/// Best and median rate of `rounds` bursts of `n` pipelined Sets on one connection.
pub async fn pipelined_sets(path: &Path, n: usize, rounds: usize) -> (f64, f64, u64) {
    let (mut lines, mut w) = connect(path).await;
    let mut rates = Vec::new();
    let mut errors = 0;
    for round in 0..rounds {
        let mut burst = Vec::with_capacity(n * 100);
        for i in 0..n {
            burst.extend_from_slice(
                format!("{{\"id\":{i},\"method\":\"Set\",\"params\":{{\"namespace\":\"pipe\",\"key\":\"k{round}-{i}\",\"value\":{i}}}}}\n").as_bytes(),
            );
        }
        let start = Instant::now();
        w.write_all(&burst).await.unwrap();
        for _ in 0..n {
            if lines
                .next_line()
                .await
                .unwrap()
                .expect("an answer")
                .contains("\"error\"")
            {
                errors += 1;
            }
        }
        rates.push(n as f64 / start.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    (rates[rates.len() - 1], rates[rates.len() / 2], errors)
}

/// Sets per second on one connection keeping `window` requests in flight.
pub async fn windowed_sets(path: &Path, window: usize, total: usize) -> (f64, u64) {
    let (mut lines, mut w) = connect(path).await;
    let (mut sent, mut answered, mut errors) = (0, 0, 0);
    let start = Instant::now();
    while answered < total {
        let mut out = Vec::new();
        while sent < total && sent - answered < window {
            out.extend_from_slice(
                format!("{{\"id\":{sent},\"method\":\"Set\",\"params\":{{\"namespace\":\"window\",\"key\":\"k{sent}\",\"value\":{sent}}}}}\n").as_bytes(),
            );
            sent += 1;
        }
        if !out.is_empty() {
            w.write_all(&out).await.unwrap();
        }
        let answer = lines.next_line().await.unwrap().expect("an answer");
        if answer.contains("\"error\"") {
            errors += 1;
        }
        answered += 1;
    }
    (total as f64 / start.elapsed().as_secs_f64(), errors)
}

pub async fn call(
    lines: &mut Lines,
    w: &mut OwnedWriteHalf,
    request: serde_json::Value,
) -> serde_json::Value {
    let mut line = request.to_string();
    line.push('\n');
    serde_json::from_str(&round_trip(lines, w, line.as_bytes()).await).unwrap()
}
