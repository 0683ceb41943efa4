//! ObjectWriters: the registry of the per-object Writers (one per data object with a database
//! file of its own), started on first use — so an object an operator adds while the node runs
//! is usable at once — and forgotten when its object changes or goes away.
//!
//! A relative `conn_string` is a file in the node's data folder (not the folder the node was
//! started from): [`resolve`].
//!
//! Invariant: at most one Writer per database file path exists in the registry; an object that
//! lives in the catalog (`conn_string` absent or `catalog`) never gets one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::catalog::reader::Reader;
use crate::catalog::writer::DbWriter;
use crate::catalog::{CatalogError, DbSettings, open_connection};

/// Where an object's rows live: `None` for the catalog itself, else its database file (a
/// relative path is in `data_dir`).
pub fn resolve(data_dir: &Path, conn_string: Option<&str>) -> Option<PathBuf> {
    match conn_string {
        None | Some("") | Some("catalog") => None,
        Some(path) => {
            let path = Path::new(path);
            Some(if path.is_absolute() {
                path.to_path_buf()
            } else {
                data_dir.join(path)
            })
        }
    }
}

/// Whether `candidate` is the catalog file `catalog` itself (the same file reached by another
/// path: `./x.db`, a symlink, a hard link), which a data object must never be: its Writer would
/// be a second writer on the catalog, and a sql job against it would bypass the engine's
/// bookkeeping (issue 11, point 8).
pub fn is_catalog_file(catalog: &Path, candidate: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(a), Ok(b)) = (std::fs::metadata(catalog), std::fs::metadata(candidate)) {
        return a.dev() == b.dev() && a.ino() == b.ino();
    }
    // One of them does not exist yet: compare the paths as the file system would resolve them
    // (`..` taken lexically, since the folders it climbs out of may not exist yet either).
    let normal = |p: &Path| {
        let mut abs = PathBuf::new();
        for part in std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .components()
        {
            match part {
                std::path::Component::ParentDir => {
                    abs.pop();
                }
                std::path::Component::CurDir => {}
                other => abs.push(other),
            }
        }
        match (abs.parent().map(std::fs::canonicalize), abs.file_name()) {
            (Some(Ok(dir)), Some(name)) => dir.join(name),
            _ => abs,
        }
    };
    normal(catalog) == normal(candidate)
}

/// The per-object Writers of a node.
pub struct ObjectWriters {
    data_dir: PathBuf,
    settings: DbSettings,
    reader: Reader,
    writers: Mutex<HashMap<String, (PathBuf, DbWriter)>>,
}

impl ObjectWriters {
    /// A registry that reads object rows through `reader`.
    pub fn new(data_dir: PathBuf, settings: DbSettings, reader: Reader) -> Self {
        Self {
            data_dir,
            settings,
            reader,
            writers: Mutex::new(HashMap::new()),
        }
    }

    /// The node's data folder.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The Writer of object `name` if it is running already (no IO).
    pub fn running(&self, name: &str) -> Option<DbWriter> {
        let writers = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        writers.get(name).map(|(_, addr)| addr.clone())
    }

    /// The Writer of object `name`, started if it is not running: reads the object's row and
    /// opens its database (blocking IO on the first use of an object).
    pub fn get(&self, name: &str) -> Result<DbWriter, String> {
        if let Some(addr) = self.running(name) {
            return Ok(addr);
        }
        let conn_string = self
            .reader
            .object_conn_string(name)
            .map_err(|e| e.to_string())?;
        let Some(conn_string) = conn_string else {
            return Err(format!("object `{name}` does not exist or is disabled"));
        };
        let Some(path) = resolve(&self.data_dir, conn_string.as_deref()) else {
            return Err(format!(
                "object `{name}` lives in the catalog; sql jobs never run against the catalog"
            ));
        };
        self.start(name, path)
    }

    /// Starts (or returns) the Writer of `name` on the database at `path`.
    pub fn start(&self, name: &str, path: PathBuf) -> Result<DbWriter, String> {
        if is_catalog_file(self.reader.path(), &path) {
            return Err(format!(
                "object `{name}`: its database {} is the catalog file itself; sql jobs never \
                 run against the catalog",
                path.display()
            ));
        }
        let mut writers = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((running_path, addr)) = writers.get(name)
            && *running_path == path
        {
            return Ok(addr.clone());
        }
        let conn = open_connection(&path, &self.settings).map_err(|e| {
            CatalogError::from(e)
                .within(&path, format!("opening the database of object `{name}`"))
                .to_string()
        })?;
        let writer = DbWriter::new(
            format!("object {name}"),
            path.clone(),
            conn,
            self.settings.clone(),
        );
        let addr = writer;
        tracing::info!(object = %name, db = %path.display(), "object writer started");
        writers.insert(name.to_string(), (path, addr.clone()));
        Ok(addr)
    }

    /// Forgets the Writers of objects that were removed, disabled or moved to another file
    /// (their next use starts a new one); `objects` are the enabled objects' names and
    /// `conn_string`s.
    pub fn retain(&self, objects: &[(String, Option<String>)]) {
        let mut writers = self.writers.lock().unwrap_or_else(|p| p.into_inner());
        writers.retain(|name, (path, _)| {
            let keep = objects.iter().any(|(n, c)| {
                n == name && resolve(&self.data_dir, c.as_deref()).as_ref() == Some(path)
            });
            if !keep {
                tracing::info!(object = %name, "object changed or removed; its writer stops");
            }
            keep
        });
    }
}
