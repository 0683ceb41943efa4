//! Inbox is a thread per `[[inbox]]` entry. It owns a watched folder: each complete file that
//! lands there (written and closed, or moved in — inotify's close-write and moved-to, through
//! `notify` and its debouncer) and each file already there at start is moved into its run's own
//! folder, `<data_dir>/inbox/<job>/<key>/<name>`, and a run of the entry's job is queued with
//! its path; it talks to the CatalogWriter (its `enqueue_inbox_file` verb) and nothing else.
//!
//! A file is never lost nor queued twice, whatever instant the process dies at:
//! 1. a folder `<key>` is made (a fresh name) and a marker `.pending/<key>` written;
//! 2. the file is renamed into the folder — one atomic step, which is why the watched folder
//!    must be on the data folder's file system (checked at start);
//! 3. the run is queued in one transaction with the key (`inbox_file`: a key queues at most one
//!    run);
//! 4. the marker is removed.
//!
//! At start, and after a failed step, every marker is looked at again: a folder holding its
//! file is queued (its key decides whether it was already), an empty one was never filled (the
//! file is still in the watched folder, or was taken by another claim) and goes. Only then is
//! the watched folder read, so a file is in exactly one place at any instant.
//!
//! Invariant: a file leaves the watched folder only by a rename into a folder whose marker
//! exists; a marker goes only once its key is recorded (or its folder never got a file).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::Duration;

use notify::EventKind;
use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify_debouncer_full::{DebounceEventResult, new_debouncer};

use super::Clock;
use crate::catalog::inbox::InboxFile;
use crate::catalog::writer::DbWriter;
use crate::config::InboxSection;

/// How long the debouncer holds an event to merge it with the next ones of the same file.
const DEBOUNCE: Duration = Duration::from_millis(50);
/// After a failed step (the catalog unavailable, the disk full), the markers are looked at
/// again this often.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// How often a waiting inbox thread looks whether it was told to stop.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// The running inboxes of an engine; dropping it (or [`Inboxes::stop`]) stops their threads.
#[derive(Default)]
pub struct Inboxes {
    stop: Arc<AtomicBool>,
    threads: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Inboxes {
    /// Starts one thread per entry of `config`; an entry that cannot start (its folder cannot
    /// be made, or is on another file system than the data folder) is logged and skipped.
    pub fn start(
        config: &[InboxSection],
        data_dir: &Path,
        writer: DbWriter,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let inboxes = Inboxes::default();
        for entry in config {
            let inbox = match Inbox::new(entry, data_dir, writer.clone(), clock.clone()) {
                Ok(inbox) => inbox,
                Err(why) => {
                    tracing::error!(inbox = %entry.path, job = %entry.job, "inbox not started: {why}");
                    continue;
                }
            };
            let stop = inboxes.stop.clone();
            let started = std::thread::Builder::new()
                .name(format!("inbox {}", entry.job))
                .spawn(move || inbox.run(&stop));
            match started {
                Ok(handle) => inboxes
                    .threads
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(handle),
                Err(e) => {
                    tracing::error!(inbox = %entry.path, "cannot start the inbox thread: {e}")
                }
            }
        }
        inboxes
    }

    /// Stops watching: each thread ends after the file it is moving, if any (files landing
    /// from now on wait in their folders for the next start).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Drop for Inboxes {
    fn drop(&mut self) {
        self.stop();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// One watched folder.
struct Inbox {
    /// The folder watched.
    watched: PathBuf,
    /// Its runs' folders: `<data_dir>/inbox/<job>`.
    runs: PathBuf,
    /// Markers of files being moved and queued.
    pending: PathBuf,
    job: String,
    pattern: glob::Pattern,
    writer: DbWriter,
    clock: Arc<dyn Clock>,
    /// Distinguishes folders made in the same millisecond.
    seq: u64,
}

impl Inbox {
    fn new(
        entry: &InboxSection,
        data_dir: &Path,
        writer: DbWriter,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, String> {
        let watched = PathBuf::from(&entry.path);
        let runs = data_dir.join("inbox").join(&entry.job);
        let pending = runs.join(".pending");
        for dir in [&watched, &pending] {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        if !same_file_system(&watched, &runs)? {
            return Err(format!(
                "{} is not on the file system of the data folder ({}): a file must move into \
                 its run's folder by one rename, or a crash could queue it twice",
                watched.display(),
                runs.display()
            ));
        }
        let pattern = glob::Pattern::new(&entry.pattern)
            .map_err(|e| format!("pattern `{}`: {e}", entry.pattern))?;
        Ok(Self {
            watched,
            runs,
            pending,
            job: entry.job.clone(),
            pattern,
            writer,
            clock,
            seq: 0,
        })
    }

    /// Recovers what a previous process left, takes the files already there, then every file
    /// the watcher reports, until stopped.
    fn run(mut self, stop: &AtomicBool) {
        let (tx, rx): (Sender<PathBuf>, Receiver<PathBuf>) = channel();
        // Watching starts before the folder is read: a file landing in between is both listed
        // and reported, and the second claim finds it gone.
        let debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
            let Ok(events) = result else { return };
            for event in events {
                if let Some(path) = complete_file(&event.kind, &event.paths) {
                    let _ = tx.send(path);
                }
            }
        });
        let mut debouncer = match debouncer {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(inbox = %self.watched.display(), "cannot watch: {e}");
                return;
            }
        };
        if let Err(e) = debouncer.watch(&self.watched, notify::RecursiveMode::NonRecursive) {
            tracing::error!(inbox = %self.watched.display(), "cannot watch: {e}");
            return;
        }
        tracing::info!(inbox = %self.watched.display(), job = %self.job, "inbox watching");
        let mut failing = !self.recover();
        self.take_present();
        let mut retried = std::time::Instant::now();
        while !stop.load(Ordering::Acquire) {
            match rx.recv_timeout(STOP_CHECK) {
                Ok(path) => failing |= !self.take(&path),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if failing && retried.elapsed() >= RETRY_EVERY {
                retried = std::time::Instant::now();
                failing = !self.recover();
            }
        }
        debouncer.stop_nonblocking();
    }

    /// Every file already in the watched folder.
    fn take_present(&mut self) {
        let entries = match std::fs::read_dir(&self.watched) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(inbox = %self.watched.display(), "cannot read: {e}");
                return;
            }
        };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
        paths.sort();
        for path in paths {
            self.take(&path);
        }
    }

    /// Moves `path` into a new run folder and queues its run. False when a step failed after
    /// the file was moved (its marker stays, for [`Inbox::recover`]).
    fn take(&mut self, path: &Path) -> bool {
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(String::from) else {
            return true;
        };
        // Dot files are the writer's temporaries (and ours); only regular files count.
        if name.starts_with('.') || !self.pattern.matches(&name) || !path.is_file() {
            return true;
        }
        let key = match self.new_folder() {
            Ok(key) => key,
            Err(e) => {
                tracing::error!(inbox = %self.watched.display(), "cannot make a run folder: {e}");
                return true;
            }
        };
        let folder = self.runs.join(&key);
        let marker = self.pending.join(&key);
        if let Err(e) = std::fs::write(&marker, path.to_string_lossy().as_bytes()) {
            tracing::error!(inbox = %self.watched.display(), "cannot write {}: {e}", marker.display());
            let _ = std::fs::remove_dir(&folder);
            return true;
        }
        let target = folder.join(&name);
        if let Err(e) = std::fs::rename(path, &target) {
            // Gone already (taken by the claim that saw it first), or not ours to move.
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(file = %path.display(), "cannot move into {}: {e}", folder.display());
            }
            let _ = std::fs::remove_file(&marker);
            let _ = std::fs::remove_dir(&folder);
            return true;
        }
        self.queue(&key, &target, &name, path)
    }

    /// Queues the file in run folder `key` and removes its marker; false when the catalog
    /// refused or failed (the marker stays).
    fn queue(&self, key: &str, target: &Path, name: &str, source: &Path) -> bool {
        let file = InboxFile {
            key: format!("{}/{key}", self.job),
            job: self.job.clone(),
            path: target.display().to_string(),
            file: name.to_string(),
            inbox: self.watched.display().to_string(),
            source: source.display().to_string(),
        };
        match self.writer.enqueue_inbox_file(file, self.clock.now_ms()) {
            Ok(run) => {
                tracing::debug!(inbox = %self.watched.display(), ?run, file = %target.display(), "inbox file queued");
                let _ = std::fs::remove_file(self.pending.join(key));
                true
            }
            Err(e) => {
                super::log_write_error(&format!("queueing inbox file {}", target.display()), &e);
                false
            }
        }
    }

    /// Looks at every marker: a folder holding its file is queued (once: its key decides), an
    /// empty one goes. True when none is left failing.
    fn recover(&mut self) -> bool {
        let Ok(markers) = std::fs::read_dir(&self.pending) else {
            return false;
        };
        let mut keys: Vec<String> = markers
            .filter_map(|m| m.ok()?.file_name().into_string().ok())
            .collect();
        keys.sort();
        let mut ok = true;
        for key in keys {
            let folder = self.runs.join(&key);
            let marker = self.pending.join(&key);
            let source = std::fs::read_to_string(&marker).unwrap_or_default();
            let file = std::fs::read_dir(&folder)
                .ok()
                .and_then(|mut d| d.find_map(|e| e.ok()))
                .map(|e| e.path());
            match file {
                Some(target) => {
                    let name = target
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    tracing::info!(inbox = %self.watched.display(), file = %target.display(), "inbox file found moved but maybe not queued: queueing it unless it was");
                    ok &= self.queue(&key, &target, &name, Path::new(&source));
                }
                None => {
                    let _ = std::fs::remove_dir(&folder);
                    let _ = std::fs::remove_file(&marker);
                }
            }
        }
        ok
    }

    /// A new run folder, named by the time and a sequence number; its name is the key.
    fn new_folder(&mut self) -> std::io::Result<String> {
        let now = self.clock.now_ms();
        loop {
            self.seq += 1;
            let key = format!("{now}-{:06}", self.seq);
            match std::fs::create_dir(self.runs.join(&key)) {
                Ok(()) => return Ok(key),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// The file an event says is complete: written and closed, or moved in.
fn complete_file(kind: &EventKind, paths: &[PathBuf]) -> Option<PathBuf> {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write))
        | EventKind::Modify(ModifyKind::Name(
            RenameMode::To | RenameMode::Both | RenameMode::Any,
        )) => paths.last().cloned(),
        _ => None,
    }
}

/// Whether `a` and `b` (both existing) are on one file system, so a rename moves between them.
fn same_file_system(a: &Path, b: &Path) -> Result<bool, String> {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &Path| -> Result<u64, String> {
        let mut p = p.to_path_buf();
        // `b` may not exist yet: its nearest existing ancestor decides.
        while !p.exists() {
            if !p.pop() {
                break;
            }
        }
        std::fs::metadata(&p)
            .map(|m| m.dev())
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    Ok(dev(a)? == dev(b)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_write_and_moved_to_are_complete_files_and_a_create_is_not() {
        let p = vec![PathBuf::from("/in/a.eml")];
        let close = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert_eq!(complete_file(&close, &p), Some(p[0].clone()));
        let moved = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        let both = vec![PathBuf::from("/tmp/x"), PathBuf::from("/in/b.eml")];
        assert_eq!(complete_file(&moved, &both), Some(both[1].clone()));
        let create = EventKind::Create(notify::event::CreateKind::File);
        assert_eq!(complete_file(&create, &p), None, "still being written");
    }
}
