//! Learning-rate schedules within a stage.
//!
//! ```
//! use mechlab::train::{config::{TrainConfig, ScheduleKind}, schedule::lr_at};
//! let cfg = TrainConfig { schedule: ScheduleKind::Cosine, warmup_steps: 10, final_lr_ratio: 0.0, ..Default::default() };
//! assert_eq!(lr_at(&cfg, 1.0, 0, 110), 0.1);      // warmup starts at lr/warmup
//! assert!((lr_at(&cfg, 1.0, 10, 110) - 1.0).abs() < 1e-12);
//! assert!(lr_at(&cfg, 1.0, 109, 110) < 0.01);
//! ```

use super::config::{ScheduleKind, TrainConfig};

/// The learning rate at `step` (0-based, within a stage of `total` steps) for base rate `lr`.
pub fn lr_at(cfg: &TrainConfig, lr: f64, step: u64, total: u64) -> f64 {
    if step < cfg.warmup_steps {
        return lr * (step + 1) as f64 / cfg.warmup_steps as f64;
    }
    let span = total.saturating_sub(cfg.warmup_steps).max(1) as f64;
    let t = ((step - cfg.warmup_steps) as f64 / span).min(1.0);
    let floor = cfg.final_lr_ratio;
    let frac = match cfg.schedule {
        ScheduleKind::Constant => return lr,
        ScheduleKind::Linear => 1.0 - t,
        ScheduleKind::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * t).cos()),
    };
    lr * (floor + (1.0 - floor) * frac)
}
