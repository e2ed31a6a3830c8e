/* Our harness around MIDAS's own CalcDiffractionSpots and CalcFracOverlap (see
   make_golden.py): reads geometry, reflections, cases and a SpotsInfo.bin, prints both. */
#include "NF_HEDM/src/nf_headers.h"   /* MIDAS's, from the include path */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
int Flag = 0; double Wedge = 0; double Wavelength = 0;
double OmegaRang[MAX_N_OMEGA_RANGES][2]; int nOmeRang;
void MatrixMultF(double m[3][3], double v[3], double r[3]) {
  for (int i = 0; i < 3; i++) r[i] = m[i][0]*v[0] + m[i][1]*v[1] + m[i][2]*v[2]; }
void MatrixMultF33(double m[3][3], double n[3][3], double res[3][3]) {
  for (int r = 0; r < 3; r++) for (int c = 0; c < 3; c++)
    res[r][c] = m[r][0]*n[0][c] + m[r][1]*n[1][c] + m[r][2]*n[2][c]; }
void RotateAroundZ(double v1[3], double alpha, double v2[3]) {
  double c = cos(alpha*M_PI/180), s = sin(alpha*M_PI/180);
  double mat[3][3] = {{c, -s, 0}, {s, c, 0}, {0, 0, 1}}; MatrixMultF(mat, v1, v2); }
int main(int argc, char **argv) {
  FILE *in = fopen(argv[1], "r");
  int nL, NY, NZ, nF, nR, nH, nCase;
  fscanf(in, "%d", &nL);
  double Lsd[nL], ybc[nL], zbc[nL];
  for (int i = 0; i < nL; i++) fscanf(in, "%lf %lf %lf", &Lsd[i], &ybc[i], &zbc[i]);
  double px, oS, oSt, tx, ty, tz, pole;
  fscanf(in, "%lf %d %d %lf %lf %d %lf %lf %lf %lf", &px, &NY, &NZ, &oS, &oSt, &nF, &tx, &ty, &tz, &pole);
  fscanf(in, "%d", &nR);
  double OR[MAX_N_OMEGA_RANGES][2], BS[MAX_N_OMEGA_RANGES][4];
  for (int i = 0; i < nR; i++) fscanf(in, "%lf %lf %lf %lf %lf %lf", &OR[i][0], &OR[i][1], &BS[i][0], &BS[i][1], &BS[i][2], &BS[i][3]);
  for (int i = 0; i < nR; i++) { OmegaRang[i][0] = OR[i][0]; OmegaRang[i][1] = OR[i][1]; } nOmeRang = nR;
  fscanf(in, "%d", &nH);
  static double hkls[5000][4], Thetas[5000], Gs[5000];
  for (int i = 0; i < nH; i++) {
    fscanf(in, "%lf %lf %lf %lf %lf", &hkls[i][0], &hkls[i][1], &hkls[i][2], &hkls[i][3], &Thetas[i]);
    Gs[i] = sin(Thetas[i]*M_PI/180.0) * sqrt(hkls[i][0]*hkls[i][0] + hkls[i][1]*hkls[i][1] + hkls[i][2]*hkls[i][2]);
  }
  double RT[3][3]; RotationTilts(tx, ty, tz, RT);
  double P0[nL][3];
  for (int i = 0; i < nL; i++) { double v[3] = {-Lsd[i], 0, 0}, o[3]; MatrixMultF(RT, v, o); for (int j = 0; j < 3; j++) P0[i][j] = o[j]; }
  /* images: MIDAS SpotsInfo.bin layout */
  struct stat st; stat(argv[2], &st);
  int *obs = malloc(st.st_size); FILE *fi = fopen(argv[2], "rb"); fread(obs, 1, st.st_size, fi); fclose(fi);
  long long Size = (long long)nL * nF * NY * NZ / 32;
  double *spots = malloc(MAX_N_SPOTS * 3 * sizeof(double));
  fscanf(in, "%d", &nCase);
  for (int c = 0; c < nCase; c++) {
    double U[3][3], row[5];
    for (int i = 0; i < 9; i++) fscanf(in, "%lf", &U[i / 3][i % 3]);
    for (int i = 0; i < 5; i++) fscanf(in, "%lf", &row[i]);
    double y1 = row[0], y2 = row[1], xs = row[2], ys = row[3], gs = row[4], XG[3], YG[3];
    if (y1 > y2) { XG[0] = xs; YG[0] = ys - y1; XG[1] = xs - gs; YG[1] = ys + y2; XG[2] = xs + gs; YG[2] = ys + y2; }
    else { XG[0] = xs; YG[0] = ys + y2; XG[1] = xs - gs; YG[1] = ys - y1; XG[2] = xs + gs; YG[2] = ys - y1; }
    int nT; CalcDiffractionSpots(Lsd[0], pole, OR, nR, hkls, nH, Thetas, BS, &nT, U, spots, Gs);
    int NrPixelsGrid = 2 * (ceil((gs * 2) / px)) * (ceil((gs * 2) / px));
    int **InPixels = malloc(NrPixelsGrid * sizeof(int *));
    for (int i = 0; i < NrPixelsGrid; i++) InPixels[i] = malloc(2 * sizeof(int));
    double frac;
    CalcFracOverlap(nF, nL, nT, spots, oS, oSt, XG, YG, Lsd, Size, RT, px, ybc, zbc, gs, P0, NrPixelsGrid, obs, U, &frac, InPixels, NY, NZ);
    printf("case %d %d %.17g\n", c, nT, frac);
    for (int j = 0; j < nT; j++) printf("%.17g %.17g %.17g\n", spots[3*j], spots[3*j+1], spots[3*j+2]);
  }
  return 0;
}
