//! The V-cycle, written once (docs/mathematics.md): on every level but the coarsest,
//! smooth, restrict the residual, cycle on the next coarser level from zero, add its
//! prolongated correction, smooth again; on the coarsest, solve. Each multigrid says what
//! the steps are on its levels ([`CycleLevels`]: Poisson multigrid with its range checks
//! and residual scaling, the Stokes monolithic multigrid, the block preconditioner's
//! scalar ones) and runs [`v_cycle`].

/// The steps of a V-cycle on a hierarchy of levels, numbered from 0 (the finest) to
/// `depth() - 1` (the coarsest). Each level holds its right-hand side b and its iterate x.
pub trait CycleLevels {
    type Error;

    /// The number of levels, the coarsest included.
    fn depth(&self) -> usize;

    /// Pre-smoothing on level `l`: x improved for b (from x = 0 when `zero_initial`).
    fn pre_smooth(&mut self, l: usize, zero_initial: bool) -> Result<(), Self::Error>;

    /// Level `l`'s residual b − A x restricted to level `l + 1`'s right-hand side.
    fn restrict_residual(&mut self, l: usize) -> Result<(), Self::Error>;

    /// The solve on the coarsest level.
    fn coarse_solve(&mut self) -> Result<(), Self::Error>;

    /// Level `l + 1`'s iterate prolongated and added to level `l`'s.
    fn prolongate_correction(&mut self, l: usize) -> Result<(), Self::Error>;

    /// Post-smoothing on level `l`.
    fn post_smooth(&mut self, l: usize) -> Result<(), Self::Error>;
}

/// One V-cycle from level `l` down: improves level `l`'s x for its b (from x = 0 when
/// `zero_initial`; every coarser level starts from zero).
pub fn v_cycle<L: CycleLevels + ?Sized>(
    levels: &mut L,
    l: usize,
    zero_initial: bool,
) -> Result<(), L::Error> {
    if l + 1 == levels.depth() {
        return levels.coarse_solve();
    }
    levels.pre_smooth(l, zero_initial)?;
    levels.restrict_residual(l)?;
    v_cycle(levels, l + 1, true)?;
    levels.prolongate_correction(l)?;
    levels.post_smooth(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the steps in the order the cycle takes them.
    struct Trace {
        depth: usize,
        steps: Vec<String>,
    }

    impl CycleLevels for Trace {
        type Error = ();
        fn depth(&self) -> usize {
            self.depth
        }
        fn pre_smooth(&mut self, l: usize, zero_initial: bool) -> Result<(), ()> {
            self.steps.push(format!("pre {l} {zero_initial}"));
            Ok(())
        }
        fn restrict_residual(&mut self, l: usize) -> Result<(), ()> {
            self.steps.push(format!("restrict {l}"));
            Ok(())
        }
        fn coarse_solve(&mut self) -> Result<(), ()> {
            self.steps.push("coarse".into());
            Ok(())
        }
        fn prolongate_correction(&mut self, l: usize) -> Result<(), ()> {
            self.steps.push(format!("prolongate {l}"));
            Ok(())
        }
        fn post_smooth(&mut self, l: usize) -> Result<(), ()> {
            self.steps.push(format!("post {l}"));
            Ok(())
        }
    }

    #[test]
    fn the_cycle_visits_the_levels_in_v_order() {
        let mut three = Trace {
            depth: 3,
            steps: vec![],
        };
        v_cycle(&mut three, 0, false).unwrap();
        assert_eq!(
            three.steps,
            [
                "pre 0 false",
                "restrict 0",
                "pre 1 true",
                "restrict 1",
                "coarse",
                "prolongate 1",
                "post 1",
                "prolongate 0",
                "post 0"
            ]
        );
        let mut one = Trace {
            depth: 1,
            steps: vec![],
        };
        v_cycle(&mut one, 0, false).unwrap();
        assert_eq!(one.steps, ["coarse"]);
    }
}
