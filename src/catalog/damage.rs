//! [`Damage`]: what a running node knows of one database file's soundness. The file's writer
//! ([`super::writer::DbWriter`]) and the reads of it ([`super::reader::Reader`]) report here
//! the corruption errors SQLite gives them (`SQLITE_CORRUPT`, `SQLITE_NOTADB`:
//! [`CatalogError::is_damaged`]); the first one marks the file damaged for the life of the
//! process. From then on its writer commits and checkpoints nothing, and the owner's hook (for
//! the catalog, the runtime's fatal alarm) has been told once (issue 12, defect 3: on any
//! corruption error stop, with the file named, and never write to it).
//!
//! Invariant: a file found damaged stays damaged; the hook is called at most once, with the
//! first finding, which names the file and what was being done; nothing that writes through
//! [`Damage::unless_damaged`] (the writer's transactions and checkpoints) runs once the finding
//! is recorded, and a finding waits for the one under way.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, RwLock};

use super::CatalogError;

/// Told, once, when the file is found damaged: the finding
/// ([`CatalogError::FoundDamaged`]).
pub type DamageHook = Box<dyn Fn(&CatalogError) + Send + Sync>;

/// The first corruption error met on a file: where, while doing what, and what SQLite said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The file.
    pub path: PathBuf,
    /// What the node was doing (a verb: "claiming runs", "reading the scheduled jobs").
    pub doing: String,
    /// SQLite's words (or `quick_check`'s findings).
    pub detail: String,
}

impl Finding {
    /// The finding of `e` (a corruption error) met on `path` while `doing`.
    pub fn of(path: &Path, doing: &str, e: &CatalogError) -> Self {
        Finding {
            path: path.to_path_buf(),
            doing: doing.to_string(),
            detail: Self::detail_of(e),
        }
    }

    /// What a corruption error says of the file, without the file's name when it carries one.
    pub fn detail_of(e: &CatalogError) -> String {
        match e {
            CatalogError::Damaged { detail, .. } | CatalogError::FoundDamaged { detail, .. } => {
                detail.clone()
            }
            CatalogError::In { source, .. } => Self::detail_of(source),
            other => other.to_string(),
        }
    }

    /// The error each caller receives from now on.
    pub fn error(&self) -> CatalogError {
        CatalogError::FoundDamaged {
            path: self.path.clone(),
            doing: self.doing.clone(),
            detail: self.detail.clone(),
        }
    }
}

/// Whether one database file was found damaged while the node works on it; shared by its
/// writer and its reads.
#[derive(Default)]
pub struct Damage {
    found: OnceLock<Finding>,
    hook: Mutex<Option<DamageHook>>,
    /// Held shared while something writes to the file, exclusively to record a finding.
    writes: RwLock<()>,
}

impl std::fmt::Debug for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Damage")
            .field("found", &self.found.get())
            .finish()
    }
}

impl Damage {
    /// The first finding, once there is one.
    pub fn found(&self) -> Option<&Finding> {
        self.found.get()
    }

    /// Whether the file was found damaged.
    pub fn is_damaged(&self) -> bool {
        self.found.get().is_some()
    }

    /// Runs `write` (a transaction, a checkpoint) unless the file was found damaged; a finding
    /// made meanwhile (by a read on another thread) waits for it to end, so that once the
    /// finding is told, nothing is written to the file.
    pub fn unless_damaged<T>(&self, write: impl FnOnce() -> T) -> Option<T> {
        let _writing = self.writes.read().unwrap_or_else(|p| p.into_inner());
        if self.is_damaged() {
            return None;
        }
        Some(write())
    }

    /// Calls `hook` when the file is found damaged (at once if it already was); replaces an
    /// earlier hook that was not called yet.
    pub fn on_damaged(&self, hook: DamageHook) {
        let mut slot = self.hook.lock().unwrap_or_else(|p| p.into_inner());
        match self.found.get() {
            Some(finding) => hook(&finding.error()),
            None => *slot = Some(hook),
        }
    }

    /// Passes `e` on, unless it is a corruption error: then the file is damaged (the first
    /// finding is kept, and told to the hook, or logged when there is none), and the error
    /// passed on is the finding ([`CatalogError::FoundDamaged`]).
    pub fn check(&self, path: &Path, doing: &str, e: CatalogError) -> CatalogError {
        if !e.is_damaged() {
            // Any other storage error names the file and what was being done too.
            return e.within(path, doing);
        }
        self.record(Finding::of(path, doing, &e)).error()
    }

    /// Marks the file damaged with `finding`, unless it already was (after the write under way,
    /// if any, ended); returns the first finding.
    pub fn record(&self, finding: Finding) -> &Finding {
        // The hook's lock also orders a concurrent `on_damaged` after the finding.
        let mut slot = self.hook.lock().unwrap_or_else(|p| p.into_inner());
        let mut first = false;
        let kept = {
            let _no_writes = self.writes.write().unwrap_or_else(|p| p.into_inner());
            self.found.get_or_init(|| {
                first = true;
                finding
            })
        };
        if first {
            match slot.take() {
                Some(hook) => hook(&kept.error()),
                None => tracing::error!("{}", kept.error()),
            }
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn corrupt() -> CatalogError {
        CatalogError::Sqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some("database disk image is malformed".into()),
        ))
    }

    /// The hook hears the first finding once, however many corruption errors follow; other
    /// errors pass unchanged and mark nothing.
    #[test]
    fn the_first_corruption_error_is_told_once_and_other_errors_pass() {
        let damage = Damage::default();
        let told = Arc::new(AtomicUsize::new(0));
        let heard = Arc::new(Mutex::new(String::new()));
        let (t, h) = (told.clone(), heard.clone());
        damage.on_damaged(Box::new(move |e| {
            t.fetch_add(1, Ordering::SeqCst);
            *h.lock().unwrap() = e.to_string();
        }));
        let path = Path::new("/x/catalog.db");
        let busy = damage.check(path, "claiming runs", CatalogError::Refused("busy".into()));
        assert!(matches!(busy, CatalogError::Refused(_)));
        assert!(!damage.is_damaged());
        let first = damage.check(path, "claiming runs", corrupt().within(path, "claiming"));
        assert!(first.is_damaged(), "{first}");
        damage.check(path, "reading the scheduled jobs", corrupt());
        assert_eq!(told.load(Ordering::SeqCst), 1);
        let said = heard.lock().unwrap().clone();
        assert!(
            said.starts_with(
                "/x/catalog.db: the database file is damaged (found while claiming runs:"
            ),
            "{said}"
        );
        assert!(said.contains("malformed"), "{said}");
        assert_eq!(damage.found().unwrap().doing, "claiming runs");
    }

    /// A hook set after the finding is told at once.
    #[test]
    fn a_hook_set_after_the_finding_is_told_at_once() {
        let damage = Damage::default();
        damage.check(Path::new("c.db"), "reading", corrupt());
        let told = Arc::new(AtomicUsize::new(0));
        let t = told.clone();
        damage.on_damaged(Box::new(move |_| {
            t.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(told.load(Ordering::SeqCst), 1);
    }
}
