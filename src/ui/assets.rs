//! The UI's static files, compiled into the binary: nothing is fetched at run time, from the
//! network or from disk. The vendored front-end files keep their versions in their names
//! (`static/vendor/README.md` says where each came from).

/// One embedded file.
pub struct Asset {
    /// Its name under `/ui/static/`.
    pub name: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
}

/// Every file the UI serves.
pub const ASSETS: &[Asset] = &[
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../../static/app.css"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../static/app.js"),
    },
    Asset {
        name: "htmx-2.0.11.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../static/vendor/htmx-2.0.11.min.js"),
    },
    Asset {
        name: "uPlot-1.6.32.iife.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../static/vendor/uPlot-1.6.32.iife.min.js"),
    },
    Asset {
        name: "uPlot-1.6.32.min.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../../static/vendor/uPlot-1.6.32.min.css"),
    },
];

/// The file of that name.
pub fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}
