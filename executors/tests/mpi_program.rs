//! An external MPI program, compiled here with `mpicc`, run by a real
//! `mpiexec` from a shell activity. Needs MPICH; built with `--features mpi`.

use std::process::Command;
use std::time::Duration;

use constellation::collect::SingleEventCollector;
use constellation::Pool;
use executors::shell::{Capture, MpiLauncher, MpiProgram, ShellActivity, ShellResult};

const SUM_OF_RANKS: &str = r#"
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, mine, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mine = (rank + 1) * atoi(argv[1]);
    MPI_Reduce(&mine, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("size=%d sum=%d\n", size, sum);
    MPI_Finalize();
    return 0;
}
"#;

#[test]
fn an_mpi_program_built_with_mpicc_runs_under_mpiexec() {
    let dir = std::env::temp_dir().join(format!("constellation-mpicc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("sum.c");
    std::fs::write(&source, format!("#include <stdlib.h>\n{SUM_OF_RANKS}")).unwrap();
    let binary = dir.join("sum");
    let compiled = Command::new("mpicc")
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("mpicc must be installed for --features mpi (apt-get install mpich libmpich-dev)");
    assert!(compiled.success(), "mpicc failed");

    let pool = Pool::builder().executors(2).start().unwrap();
    let (collector, results) = SingleEventCollector::new();
    let parent = pool.submit(collector).unwrap();
    let spec = MpiProgram::new(3, binary.display().to_string())
        .args(["10"])
        .launcher(MpiLauncher::Mpiexec { hosts: vec![] })
        .into_spec()
        .name("sum-of-ranks")
        .timeout(Duration::from_secs(120))
        .capture(Capture::Memory { limit: 1 << 16 });
    pool.submit(ShellActivity::new(spec).reply_to(parent))
        .unwrap();
    let result: ShellResult = results
        .wait_timeout(Duration::from_secs(180))
        .unwrap()
        .remove(0)
        .take()
        .unwrap();
    pool.done().unwrap();
    let result = result.check().unwrap_or_else(|failure| panic!("{failure}"));
    // Ranks 0, 1, 2 contribute 10, 20, 30.
    assert_eq!(result.stdout.text().unwrap(), "size=3 sum=60\n");
}
