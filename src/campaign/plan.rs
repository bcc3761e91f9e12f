//! A campaign cut into batches: every rank derives the same plan from the config, so a
//! batch is named by its index alone and its result does not depend on which rank solves
//! it.

use std::ops::Range;

use crate::config::{CampaignSpec, RhsSource};
use crate::fem::{Exact, Manufactured, PressureSeries};
use crate::psc::cache::Fnv;

/// What one column (right-hand side) of the campaign is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ColumnSource {
    /// The manufactured solution sin(kπx)… (study).
    Wave { k: u32 },
    /// Time step `step` (1-based) of the pressure series, at time t.
    TimeStep { step: usize, t: f64 },
    /// Column `index` of the user's HDF5 dataset.
    Input { index: usize },
}

impl ColumnSource {
    pub fn exact(&self, dim: usize) -> Option<Exact> {
        match *self {
            ColumnSource::Wave { k } => Some(Exact::Wave(Manufactured::new(k, dim))),
            ColumnSource::TimeStep { t, .. } => Some(Exact::Pressure(PressureSeries::new(t, dim))),
            ColumnSource::Input { .. } => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub index: usize,
    pub operator: usize,
    /// Its columns: indices into [`Plan::columns`] (consecutive, within one operator).
    pub columns: Range<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub operator: usize,
    /// Position among the columns of its operator.
    pub index_in_operator: usize,
    pub source: ColumnSource,
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub columns: Vec<Column>,
    pub batches: Vec<Batch>,
    /// Columns per operator.
    pub operator_columns: Vec<usize>,
    /// A hash of everything the results depend on: a journal written for another plan is
    /// refused.
    pub fingerprint: u64,
}

impl Plan {
    /// `input_columns`: the columns of the user's dataset (source hdf5; checked before).
    pub fn new(spec: &CampaignSpec, input_columns: usize) -> Plan {
        let per_operator: Vec<ColumnSource> = match &spec.rhs {
            RhsSource::TimeSeries { steps, t_end } => (1..=*steps)
                .map(|step| ColumnSource::TimeStep {
                    step,
                    t: t_end * step as f64 / *steps as f64,
                })
                .collect(),
            RhsSource::Study { ks } => ks.iter().map(|&k| ColumnSource::Wave { k }).collect(),
            RhsSource::Hdf5 { .. } => (0..input_columns)
                .map(|index| ColumnSource::Input { index })
                .collect(),
        };
        let mut columns = Vec::new();
        let mut batches = Vec::new();
        for operator in 0..spec.operators.len() {
            let first = columns.len();
            columns.extend(per_operator.iter().enumerate().map(|(i, &source)| Column {
                operator,
                index_in_operator: i,
                source,
            }));
            let mut start = first;
            while start < columns.len() {
                let end = (start + spec.batch_size).min(columns.len());
                batches.push(Batch {
                    index: batches.len(),
                    operator,
                    columns: start..end,
                });
                start = end;
            }
        }
        let description = format!(
            "tensorfem campaign plan v1; crate {}; rhs {:?}; batch_size {}; operators {:?}; columns {}",
            env!("CARGO_PKG_VERSION"),
            spec.rhs,
            spec.batch_size,
            spec.operators,
            columns.len()
        );
        Plan {
            operator_columns: vec![per_operator.len(); spec.operators.len()],
            columns,
            batches,
            fingerprint: {
                let mut h = Fnv::new();
                h.bytes(description.as_bytes());
                h.0
            },
        }
    }
}
